"""Postgres text values -> typed Spark columns: the type map of docs/type-map.md.

Bronze keeps every value as Postgres renders it (source/text_format.py pins the format);
silver types them here with plain DataFrame expressions, identical on classic PySpark
and Sail. Typing never raises: a value that cannot be typed becomes null. Because a
null must never hide a bad value (docs/architecture.md portability rule 4), validate before writing:

    check_typed(df, shape)                        # one aggregate action; raises DataError
    typed = typed_columns(df, shape.columns, table=shape.qualified_name)   # lazy

or both at once: `typed = typed_table(df, shape)`. The check reads `df` once more than
the write does (no cache: docs/architecture.md rule 7) and recomputes the typing inside one
aggregate. `cast_failures` returns the failures instead of raising; `typed_value` types
one text Column (e.g. an element of bronze `values`). A job that materializes the typed
rows anyway types once: `with_failed_texts` keeps each value that fails beside them, and
`check_failures(shape, failures_of(written, shape.columns))` reads only those.

Every parser first checks the exact shape Postgres renders (a regex) and only then uses
`try_cast`: the engines' casts accept other input, silently and not always alike (both
read '0044-03-15 BC' as 44 AD; Spark reads '1e3' as decimal 1000, Sail as null), and
`try_cast` is null, never an error, on both (a plain cast is an ANSI error on Spark).
Regexes end in `\\z`, not `$`: Java's `$` also matches before a final newline, Rust's
does not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from pipelines.errors import DataError
from pipelines.names import quote
from pipelines.silver.table_shape import SourceColumn, TableShape

log = logging.getLogger(__name__)

Parser = Callable[[Column], Column]  # Postgres text -> typed value, null when it cannot

# numeric without (p,s) can hold any value; Spark decimals stop at 38 digits. 29 integer
# and 9 fractional digits; a value that does not fit fails check_typed (never rounded).
UNCONSTRAINED_NUMERIC = DecimalType(38, 9)
MAX_DECIMAL_PRECISION = 38

_FIXED: dict[str, DataType] = {
    "int2": ShortType(), "int4": IntegerType(), "int8": LongType(), "oid": LongType(),
    "float4": FloatType(), "float8": DoubleType(), "bool": BooleanType(),
    "date": DateType(), "timestamp": TimestampNTZType(), "timestamptz": TimestampType(),
    "bytea": BinaryType(),
}
# Kept as the text Postgres renders, on purpose (see docs/type-map.md): no warning.
_TEXT = frozenset({
    "text", "varchar", "bpchar", "char", "name", "citext", "uuid", "json", "jsonb", "xml",
    "time", "timetz", "interval",  # Spark 4.0 has no TIME; intervals mix months and days
    "money", "inet", "cidr", "macaddr", "macaddr8", "bit", "varbit", "tsvector", "tsquery",
    "pg_lsn", "point", "line", "lseg", "box", "path", "polygon", "circle",
    "int4range", "int8range", "numrange", "daterange", "tsrange", "tstzrange",
    "int4multirange", "int8multirange", "nummultirange", "datemultirange",
    "tsmultirange", "tstzmultirange",
    "_box",  # box[] separates elements with ';', not ',': kept as its array literal
})

_INTEGER = r"^-?[0-9]+\z"
_DECIMAL = r"^-?[0-9]+(\.[0-9]+)?\z"
_FLOAT = r"^(-?[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?|NaN|-?Infinity)\z"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\z"
_TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
_OFFSET = r"[-+][0-9]{2}(:[0-9]{2}){0,2}\z"  # +00, +05:30, +05:53:28 (local mean time)
_BYTEA = r"^\\x([0-9a-fA-F]{2})*\z"
# Array literals: Postgres quotes an element that is empty, NULL, or holds {},"\ or a
# space, and escapes " and \ inside quotes with a backslash. Escapes are first replaced
# by NUL-led codes (Postgres text never holds NUL): an item is then "quoted" or bare, a
# regex without a repeated group (Java recurses per repetition: a StackOverflowError on
# an element with thousands of escapes).
_ESCAPES = (("\\\\", "\x00b"), ('\\"', "\x00q"))  # left to right, as Postgres pairs them
_ARRAY = r"(?s)^\{(.*)\}\z"
_ARRAY_ITEM = r'"[^"]*"|[^",{}\\]+'


def numeric_precision_scale(type_mod: int) -> tuple[int, int] | None:
    """(precision, scale) of numeric's atttypmod; None when unconstrained (-1)."""
    if type_mod < 4:  # VARHDRSZ: -1 means no (p,s)
        return None
    mod = type_mod - 4
    # Scale is an 11-bit signed field since Postgres 15 (numeric(3,-2)); the same value
    # as the older `mod & 0xffff` for scales 0..1000.
    return (mod >> 16) & 0xFFFF, ((mod & 0x7FF) ^ 1024) - 1024


def _decimal_type(type_mod: int) -> DecimalType:
    precision_scale = numeric_precision_scale(type_mod)
    if precision_scale is None:
        return UNCONSTRAINED_NUMERIC
    precision, scale = precision_scale
    # Spark has no negative scale nor scale > precision: keep the digits either side.
    integer_digits, scale = max(precision - scale, 0), max(scale, 0)
    scale = min(scale, MAX_DECIMAL_PRECISION)
    return DecimalType(min(integer_digits + scale, MAX_DECIMAL_PRECISION), scale)


def _known(type_name: str) -> bool:
    if type_name in _TEXT or type_name in _FIXED or type_name == "numeric":
        return True
    return type_name.startswith("_") and _known(type_name[1:])


def spark_type(column: SourceColumn) -> DataType:
    """The Spark type of a source column (unknown types, e.g. enums: string)."""
    return _spark_type(column.type_name, column.type_mod)


def _spark_type(type_name: str, type_mod: int) -> DataType:
    if type_name in _TEXT:
        return StringType()
    if type_name.startswith("_"):  # array; atttypmod is the element's
        return ArrayType(_spark_type(type_name[1:], type_mod), containsNull=True)
    if type_name == "numeric":
        return _decimal_type(type_mod)
    return _FIXED.get(type_name, StringType())


def _gated(pattern: str, to: DataType) -> Parser:
    return lambda text: F.when(text.rlike(pattern), text.try_cast(to))


def _decimal(to: DecimalType) -> Parser:
    def parse(text: Column) -> Column:
        integer_digits = F.length(F.regexp_extract(text, r"^-?0*([0-9]*)", 1))
        fraction = F.regexp_extract(text, r"\.([0-9]+)\z", 1)
        fraction_digits = F.length(F.regexp_replace(fraction, r"0+\z", ""))
        fits = (text.rlike(_DECIMAL) & (integer_digits <= to.precision - to.scale)
                & (fraction_digits <= to.scale))  # so the cast never rounds nor overflows
        return F.when(fits, text.try_cast(to))
    return parse


def _bool(text: Column) -> Column:
    # boolout renders t/f; a `::text` cast (e.g. in a hand-written SELECT) renders true/false.
    return (F.when(text.isin("t", "true"), F.lit(True))
            .when(text.isin("f", "false"), F.lit(False)))


def _bytea(text: Column) -> Column:
    return F.when(text.rlike(_BYTEA), F.unhex(F.regexp_extract(text, r"^\\x(.*)\z", 1)))


def _unquote(item: Column) -> Column:
    quoted = F.substring(item, F.lit(2), F.length(item) - 2)
    for escape, code in reversed(_ESCAPES):
        quoted = F.replace(quoted, F.lit(code), F.lit(escape[1]))
    return (F.when(item == "NULL", F.lit(None).cast(StringType()))
            .when(item.startswith('"'), quoted)
            .otherwise(item))


def _array(element: Parser) -> Parser:
    def parse(text: Column) -> Column:
        for escape, code in _ESCAPES:
            text = F.replace(text, F.lit(escape), F.lit(code))
        inner = F.regexp_extract(text, _ARRAY, 1)
        items = F.regexp_extract_all(inner, F.lit(_ARRAY_ITEM), 0)
        # Well formed and one-dimensional iff the items, rejoined, give back the literal.
        one_dimensional = text.rlike(_ARRAY) & (F.array_join(items, ",") == inner)
        texts = F.transform(items, _unquote)
        typed = F.transform(texts, element)
        no_element_lost = F.size(F.array_compact(texts)) == F.size(F.array_compact(typed))
        return F.when(one_dimensional & no_element_lost, typed)
    return parse


def _parser(type_name: str, type_mod: int) -> Parser:
    if type_name in _TEXT:
        return lambda text: text
    if type_name.startswith("_"):
        return _array(_parser(type_name[1:], type_mod))
    if type_name in ("int2", "int4", "int8", "oid"):
        return _gated(_INTEGER, _FIXED[type_name])
    if type_name in ("float4", "float8"):
        return _gated(_FLOAT, _FIXED[type_name])
    if type_name == "numeric":
        return _decimal(_decimal_type(type_mod))
    if type_name == "bool":
        return _bool
    if type_name == "date":
        return _gated(_DATE, DateType())
    if type_name == "timestamp":
        return _gated(_TIMESTAMP + r"\z", TimestampNTZType())
    if type_name == "timestamptz":
        return _gated(_TIMESTAMP + _OFFSET, TimestampType())
    if type_name == "bytea":
        return _bytea
    return lambda text: text  # unknown: an enum, a domain, an extension's type


def typed_value(column: SourceColumn, text: Column) -> Column:
    """`text` (a Postgres text value) typed as `spark_type(column)`; null if it cannot be."""
    return _parser(column.type_name, column.type_mod)(text)


def _can_fail(column: SourceColumn) -> bool:
    return not isinstance(_spark_type(column.type_name, column.type_mod), StringType)


def _col(name: str) -> Column:
    return F.col(quote(name))


_warned: set[tuple[str, str]] = set()


def _warn_unknown(table: str, column: SourceColumn) -> None:
    if _known(column.type_name) or (table, column.name) in _warned:
        return
    _warned.add((table, column.name))
    log.warning("%s.%s: Postgres type %r is not in the type map (an enum, a domain or an "
                "extension type?); kept as the text Postgres renders", table or "?",
                column.name, column.type_name)


def _check_text_columns(df: DataFrame, columns: Sequence[SourceColumn]) -> None:
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate source columns: {sorted(names)}")
    types = {f.name: f.dataType for f in df.schema.fields}
    missing = [n for n in names if n not in types]
    if missing:
        raise ValueError(f"columns {missing} are not in the DataFrame ({df.columns})")
    not_text = {n: types[n].simpleString() for n in names if types[n] != StringType()}
    if not_text:
        raise ValueError(f"columns to type must hold Postgres text (string): {not_text}")


def typed_columns(df: DataFrame, columns: Sequence[SourceColumn],
                  table: str = "") -> DataFrame:
    """Replace each source column's text with its typed value, in place; lazy."""
    _check_text_columns(df, columns)
    by_name = {c.name: c for c in columns}
    for column in columns:
        _warn_unknown(table, column)
    return df.select(*(typed_value(by_name[n], _col(n)).alias(n) if n in by_name else _col(n)
                       for n in df.columns))


@dataclass(frozen=True)
class CastFailure:
    """Values of one column that are not null as text but cannot be typed."""

    column: SourceColumn
    count: int
    example: str  # the smallest bad text value

    def describe(self) -> str:
        example = self.example if len(self.example) <= 120 else self.example[:117] + "..."
        target = spark_type(self.column).simpleString()
        return (f"column {self.column.name} ({self.column.type_name}): {self.count} "
                f"value(s) cannot be typed as {target}, e.g. {example!r}"
                f"{_hint(self.column, self.example)}")


FAILED = "_cdc_failed_"  # prefix of the columns with_failed_texts adds


def with_failed_texts(df: DataFrame, columns: Sequence[SourceColumn]) -> DataFrame:
    """`df` plus, for the i-th column whose typing can fail, `_cdc_failed_<i>`: its text
    where typing turns a non-null value into null, else null."""
    _check_text_columns(df, columns)
    failed = []
    for i, column in enumerate(_checked(columns)):
        text = _col(column.name)
        bad = text.isNotNull() & typed_value(column, text).isNull()
        failed.append(F.when(bad, text).alias(f"{FAILED}{i}"))
    return df.select("*", *failed)


def failures_of(df: DataFrame, columns: Sequence[SourceColumn]) -> list[CastFailure]:
    """The failures `with_failed_texts` recorded in `df`; ONE aggregate action."""
    aggregates = failure_aggregates(columns)
    if not aggregates:
        return []
    return failures_in(df.agg(*(c.alias(n) for n, c in aggregates.items())).collect()[0],
                       columns)


def failure_aggregates(columns: Sequence[SourceColumn]) -> dict[str, Column]:
    """The aggregates failures_in reads (by name), over the columns `with_failed_texts`
    added: a caller may compute them in an action of its own."""
    failed = [F.col(f"{FAILED}{i}") for i in range(len(_checked(columns)))]
    return {**{f"n{i}": F.count(f) for i, f in enumerate(failed)},
            **{f"e{i}": F.min(f) for i, f in enumerate(failed)}}


def failures_in(row: Mapping[str, Any] | Row, columns: Sequence[SourceColumn]
                ) -> list[CastFailure]:
    """The failures in a row of failure_aggregates."""
    return [CastFailure(column, row[f"n{i}"], row[f"e{i}"])
            for i, column in enumerate(_checked(columns)) if row[f"n{i}"]]


def _checked(columns: Sequence[SourceColumn]) -> list[SourceColumn]:
    """The columns whose typing can fail, in order: the i-th has `_cdc_failed_<i>`."""
    return [c for c in columns if _can_fail(c)]


def cast_failures(df: DataFrame, columns: Sequence[SourceColumn]) -> list[CastFailure]:
    """Values that typing would turn into null, per column; ONE aggregate action."""
    return failures_of(with_failed_texts(df, columns), columns)


def check_failures(shape: TableShape, failures: Sequence[CastFailure]) -> None:
    """Raise DataError naming every column with values that cannot be typed."""
    if failures:
        raise DataError(f"{shape.qualified_name}: cannot type source values: "
                        + "; ".join(f.describe() for f in failures))


def check_typed(df: DataFrame, shape: TableShape) -> None:
    """Raise DataError if a non-null text value of `df` cannot be typed; one action."""
    check_failures(shape, cast_failures(df, shape.columns))


def typed_table(df: DataFrame, shape: TableShape) -> DataFrame:
    """check_typed (one action), then the lazily typed DataFrame."""
    check_typed(df, shape)
    return typed_columns(df, shape.columns, table=shape.qualified_name)


def _hint(column: SourceColumn, example: str) -> str:
    base = column.type_name.lstrip("_")
    if column.type_name.startswith("_") and (example.startswith("[")
                                             or example.startswith("{{")):
        return (". Only one-dimensional arrays with lower bound 1 can be typed; "
                "see docs/type-map.md")
    if base in ("date", "timestamp", "timestamptz") and ("infinity" in example
                                                          or " BC" in example):
        return (". Spark has no infinite or BC dates/timestamps: replace them in the "
                "source (e.g. NULL or an explicit date); see docs/type-map.md")
    if base == "numeric":
        return (". Spark decimals hold at most 38 digits and no NaN/Infinity; declare the "
                "column numeric(p,s) with p <= 38 or fix the value; see docs/type-map.md")
    return ". Bronze should hold Postgres text format (source/text_format.py)"
