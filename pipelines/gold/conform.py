"""Cast a report to its declared schema, and prove the cast lost nothing.

What a cast of a value that does not fit does depends on the engine: classic Spark (ANSI)
raises its own error class, Sail may turn the value into NULL (docs/architecture.md,
Portability rule 4; its 0.7.2 raised for the numeric casts measured). So every report is
checked with `try_cast`, NULL on both engines. A report is written through
`conform_to_schema`, whose first misfit stops the write before its commit; only then does
`validated_row_count` count the misfits, for one DataError naming each column. A report
rebuilt whole that fits is computed once, by its write.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pyspark.sql import Column as PyColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.errors import ConfigError, DataError
from pipelines.gold.definitions import Column

ROWS = "_rows"


def conform_to_schema(df: DataFrame, columns: Sequence[Column]) -> DataFrame:
    """The declared columns, in declared order, each cast to its declared type; the query
    that reads it (a write: before its commit) fails at the first non-null value its
    cast would turn NULL, whatever the engine's own cast does with it."""
    _check_names(df, columns)
    return df.select(*[F.when(_lost(name, type_), F.raise_error(F.lit(
        f"gold: a value of {name} does not fit {type_}"))).otherwise(
        F.col(name).cast(type_)).alias(name) for name, type_ in columns])


def _lost(name: str, type_: str):
    return F.col(name).isNotNull() & F.col(name).try_cast(type_).isNull()


def cast_failure_counts(df: DataFrame, columns: Sequence[Column],
                        also: Mapping[str, PyColumn] | None = None) -> DataFrame:
    """One row: `_rows`, then per column the non-null values its declared cast turns
    NULL, then the `also` aggregates, by name."""
    _check_names(df, columns)
    lost = [F.sum(F.when(_lost(name, type_), 1).otherwise(0)).alias(name)
            for name, type_ in columns]
    extra = [aggregate.alias(name) for name, aggregate in (also or {}).items()]
    return df.agg(F.count(F.lit(1)).alias(ROWS), *lost, *extra)


def validated_row_count(df: DataFrame, columns: Sequence[Column], report: str) -> int:
    """Rows of `df` (one Spark action); DataError if a declared cast would produce NULLs."""
    return validated_aggregates(df, columns, report)[ROWS]


def validated_aggregates(df: DataFrame, columns: Sequence[Column], report: str,
                         also: Mapping[str, PyColumn] | None = None) -> dict[str, Any]:
    """`_rows` and the `also` aggregates of `df`, by name, in the same Spark action as
    the check of its values: DataError if a declared cast would produce NULLs."""
    counts = cast_failure_counts(df, columns, also).collect()[0].asDict()
    found = {name: counts.pop(name) for name in [ROWS, *(also or {})]}
    bad = {name: n for name, n in counts.items() if n}
    if bad:
        types = dict(columns)
        detail = ", ".join(f"{name} -> {types[name]}: {n} value(s)" for name, n in bad.items())
        raise DataError(
            f"gold report {report}: values do not fit the declared schema ({detail}); "
            "nothing was written. Widen the column's type in the report's `-- columns:` "
            "header or fix its SQL")
    return found


def inferred_columns(df: DataFrame) -> tuple[Column, ...]:
    """The columns of `df` as a report declares them: (name, Spark SQL type)."""
    columns = tuple((f.name, f.dataType.simpleString()) for f in df.schema.fields)
    untyped = [name for name, type_ in columns if type_ in ("void", "null")]
    if untyped:
        raise ConfigError(f"column(s) {', '.join(untyped)} have no type (a bare NULL): "
                          "cast them in the SQL or declare them in a `-- columns:` header")
    return columns


def _check_names(df: DataFrame, columns: Sequence[Column]) -> None:
    declared = [name for name, _ in columns]
    if sorted(c.lower() for c in df.columns) != sorted(c.lower() for c in declared):
        raise ConfigError(f"the query's columns ({', '.join(df.columns)}) are not the declared "
                          f"ones ({', '.join(declared)})")
