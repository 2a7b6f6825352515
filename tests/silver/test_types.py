import logging
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, ShortType,
                               StringType, TimestampNTZType, TimestampType)

from pipelines.errors import DataError
from pipelines.silver.table_shape import SourceColumn, TableShape
from pipelines.silver.types import (check_typed, numeric_precision_scale, spark_type,
                                    typed_columns, typed_table)

pytestmark = pytest.mark.spark

UTC = timezone.utc


def numeric(precision: int, scale: int) -> int:
    """atttypmod of numeric(precision, scale), as Postgres 15+ encodes it."""
    return ((precision << 16) | (scale & 0x7FF)) + 4


def col(name: str, type_name: str, type_mod: int = -1) -> SourceColumn:
    return SourceColumn(name, type_name, type_mod, is_key=False)


@pytest.mark.parametrize(("type_name", "type_mod", "expected"), [
    ("int2", -1, ShortType()), ("int4", -1, IntegerType()), ("int8", -1, LongType()),
    ("oid", -1, LongType()), ("float4", -1, FloatType()), ("float8", -1, DoubleType()),
    ("bool", -1, BooleanType()), ("date", -1, DateType()), ("bytea", -1, BinaryType()),
    ("timestamp", -1, TimestampNTZType()), ("timestamptz", -1, TimestampType()),
    ("numeric", numeric(10, 2), DecimalType(10, 2)), ("numeric", -1, DecimalType(38, 9)),
    ("numeric", numeric(50, 20), DecimalType(38, 20)),  # wider than Spark: keep the scale
    ("numeric", numeric(3, -2), DecimalType(5, 0)),  # PG 15 negative scale: 99900 fits
    ("numeric", numeric(3, 5), DecimalType(5, 5)),  # PG 15 scale > precision: 0.00999
    *((name, -1, StringType()) for name in (
        "text", "varchar", "bpchar", "char", "name", "citext", "uuid", "json", "jsonb",
        "time", "timetz", "interval", "inet", "_box", "mood")),
    ("_int4", -1, ArrayType(IntegerType())), ("_text", -1, ArrayType(StringType())),
    ("_numeric", numeric(10, 2), ArrayType(DecimalType(10, 2))),
    ("_mood", -1, ArrayType(StringType())),
])
def test_spark_type(type_name, type_mod, expected):
    assert spark_type(col("c", type_name, type_mod)) == expected


def test_numeric_typmod_decoding():
    assert numeric_precision_scale(-1) is None
    assert numeric_precision_scale(655366) == (10, 2)  # atttypmod of numeric(10,2)
    assert numeric_precision_scale(numeric(1000, 1000)) == (1000, 1000)
    assert numeric_precision_scale(numeric(3, -2)) == (3, -2)


def frames(spark, cases):
    """Source (text) and expected DataFrames from [(column, ddl type, [(text, value)])],
    with a first column `row` (not a source column) numbering the rows."""
    rows = max(len(pairs) for _, _, pairs in cases)
    padded = [pairs + [(None, None)] * (rows - len(pairs)) for _, _, pairs in cases]
    source = spark.createDataFrame(
        [(i, *(p[i][0] for p in padded)) for i in range(rows)],
        "row int, " + ", ".join(f"`{c.name}` string" for c, _, _ in cases))
    expected = spark.createDataFrame(
        [(i, *(p[i][1] for p in padded)) for i in range(rows)],
        "row int, " + ", ".join(f"`{c.name}` {ddl}" for c, ddl, _ in cases))
    return source, expected, [c for c, _, _ in cases]


SCALARS = [
    (col("i2", "int2"), "smallint", [("-32768", -32768), ("32767", 32767)]),
    (col("i4", "int4"), "int", [("-2147483648", -2147483648), ("0", 0), ("42", 42)]),
    (col("i8", "int8"), "bigint", [("9223372036854775807", 9223372036854775807),
                                 ("-9223372036854775808", -9223372036854775808)]),
    (col("oid", "oid"), "bigint", [("4294967295", 4294967295)]),
    (col("price", "numeric", numeric(10, 2)), "decimal(10,2)",
     [("12.30", Decimal("12.30")), ("-99999999.99", Decimal("-99999999.99")),
      ("0.05", Decimal("0.05"))]),
    (col("unit price", "numeric", numeric(6, 1)), "decimal(6,1)", [("1.5", Decimal("1.5"))]),
    (col("amount", "numeric"), "decimal(38,9)",
     [("123456789.123456789", Decimal("123456789.123456789")),
      ("1.50000000000000", Decimal("1.5")),  # display scale 14, exact in 9 digits
      ("-12345678901234567890123456789", Decimal("-12345678901234567890123456789"))]),
    (col("f4", "float4"), "float", [("0.1", 0.1), ("-Infinity", float("-inf")),
                                    ("3.4028235e+38", 3.4028235e+38)]),
    (col("f8", "float8"), "double", [("NaN", float("nan")), ("Infinity", float("inf")),
                                     ("-1.5e-07", -1.5e-07), ("-0", -0.0)]),
    (col("flag", "bool"), "boolean", [("t", True), ("f", False), ("true", True)]),
    (col("born", "date"), "date", [("2024-02-29", date(2024, 2, 29)),
                                   ("0001-01-01", date(1, 1, 1))]),
    (col("local_ts", "timestamp"), "timestamp_ntz",
     [("2024-02-29 13:45:01", datetime(2024, 2, 29, 13, 45, 1)),
      ("2024-02-29 13:45:01.5", datetime(2024, 2, 29, 13, 45, 1, 500000))]),
    (col("at", "timestamptz"), "timestamp",
     [("2024-02-29 13:45:01+00", datetime(2024, 2, 29, 13, 45, 1, tzinfo=UTC)),
      ("2024-02-29 13:45:01.1+05:30", datetime(2024, 2, 29, 8, 15, 1, 100000, tzinfo=UTC)),
      ("2024-02-29 13:45:01.123456-03:30",
       datetime(2024, 2, 29, 17, 15, 1, 123456, tzinfo=UTC)),
      ("1890-03-01 13:45:01+05:53:28", datetime(1890, 3, 1, 7, 51, 33, tzinfo=UTC))]),
    (col("blob", "bytea"), "binary", [("\\x0a0b", bytearray(b"\n\x0b")), ("\\x", bytearray())]),
    (col("name", "text"), "string", [("", ""), ("NULL", "NULL"), ("a\nb", "a\nb")]),
    (col("code", "bpchar", 9), "string", [("ab   ", "ab   ")]),  # padding kept
    (col("id", "uuid"), "string", [("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                                    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")]),
    (col("doc", "jsonb"), "string", [('{"a": [1, 2]}', '{"a": [1, 2]}')]),
    (col("opens", "timetz"), "string", [("13:45:00.5+05:30", "13:45:00.5+05:30")]),
    (col("took", "interval"), "string", [("P1Y2M3DT4H5M6.5S", "P1Y2M3DT4H5M6.5S")]),
    (col("mood", "mood"), "string", [("very happy", "very happy")]),  # an enum
]

ARRAYS = [
    (col("ints", "_int4"), "array<int>",
     [("{1,2,NULL}", [1, 2, None]), ("{}", []), ("{-7}", [-7])]),
    (col("texts", "_text"), "array<string>",
     [('{"a b","c\\"d",NULL,"","NULL","x\\\\y","{}","a,b","line\nbreak",plain}',
       ["a b", 'c"d', None, "", "NULL", "x\\y", "{}", "a,b", "line\nbreak", "plain"]),
      ('{""}', [""]),
      ('{"\\\\\\"","a\\\\"}', ['\\"', "a\\"]),  # escaped \\ then escaped "
      # 5000 escapes in one element: a regex that repeats a group per escape overflows
      # the JVM stack at ~3000 (StackOverflowError stops the SparkContext).
      ('{"' + '\\"' * 5000 + '"}', ['"' * 5000])]),
    (col("prices", "_numeric", numeric(10, 2)), "array<decimal(10,2)>",
     [("{1.50,NULL,-3.00}", [Decimal("1.50"), None, Decimal("-3.00")])]),
    (col("ids", "_uuid"), "array<string>",
     [("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"])]),
    (col("blobs", "_bytea"), "array<binary>",
     [('{"\\\\x0a0b",NULL}', [bytearray(b"\n\x0b"), None])]),
    (col("ats", "_timestamptz"), "array<timestamp>",
     [('{"2024-02-29 13:45:01+00","2024-02-29 13:45:01.5+05:30"}',
       [datetime(2024, 2, 29, 13, 45, 1, tzinfo=UTC),
        datetime(2024, 2, 29, 8, 15, 1, 500000, tzinfo=UTC)])]),
    (col("floats", "_float8"), "array<double>", [("{Infinity,-1.5e+20}", [float("inf"), -1.5e20])]),
    (col("flags", "_bool"), "array<boolean>", [("{t,f,NULL}", [True, False, None])]),
    (col("days", "_date"), "array<date>", [("{2024-01-01,NULL}", [date(2024, 1, 1), None])]),
    (col("moods", "_mood"), "array<string>", [('{happy,"very sad"}', ["happy", "very sad"])]),
]


def test_every_mapped_type_is_typed_in_place(spark):
    source, expected, columns = frames(spark, SCALARS)
    # A column that is not a source column stays as it is, at its position.
    lsn = F.lit(7).cast("long").alias("_lsn")
    source = source.select(*source.columns[:3], lsn, *source.columns[3:])
    expected = expected.select(*expected.columns[:3], lsn, *expected.columns[3:])
    actual = typed_columns(source, columns, table="public.scalars")
    assert_df_equality(actual, expected, ignore_row_order=True, allow_nan_equality=True,
                       ignore_nullable=True)
    check_typed(source, TableShape("public", "scalars", tuple(columns)))  # nothing to report


def test_one_dimensional_arrays(spark):
    source, expected, columns = frames(spark, ARRAYS)
    actual = typed_table(source, TableShape("public", "arrays", tuple(columns)))  # checks
    # Not ignore_row_order: chispa then sorts by hash(array), which Sail 0.7.2 lacks.
    assert_df_equality(actual.orderBy("row"), expected.orderBy("row"), ignore_nullable=True)


BAD = [
    (col("qty", "int4"), ["abc", "2147483648", "1.0", " 12"]),
    (col("small", "int2"), ["40000"]),
    (col("price", "numeric", numeric(5, 2)), ["1234.50", "NaN"]),
    (col("amount", "numeric"), ["0.1234567891"]),  # would round in decimal(38,9)
    (col("f8", "float8"), ["1,5"]),
    (col("flag", "bool"), ["yes"]),
    (col("born", "date"), ["infinity", "0044-03-15 BC"]),
    (col("local_ts", "timestamp"), ["-infinity"]),
    (col("at", "timestamptz"), ["2024-02-29 13:45:01"]),  # no offset
    (col("blob", "bytea"), ["0a0b"]),
    (col("ints", "_int4"), ["{{1,2},{3,4}}", "{1,x}", "[0:1]={1,2}", "{1,2"]),
    (col("texts", "_text"), ['{"a"b}']),
]


def test_untypable_values_become_null_and_fail_the_check(spark):
    source, expected, columns = frames(
        spark, [(c, spark_type(c).simpleString(), [(v, None) for v in values])
                for c, values in BAD])
    typed = typed_columns(source, columns)
    assert_df_equality(typed.orderBy("row"), expected.orderBy("row"), ignore_nullable=True)
    with pytest.raises(DataError) as raised:
        check_typed(source, TableShape("shop", "orders", tuple(columns)))
    message = str(raised.value)
    assert message.startswith("shop.orders: cannot type source values: ")
    assert "column qty (int4): 4 value(s) cannot be typed as int, e.g. ' 12'" in message
    assert "column small (int2): 1 value(s) cannot be typed as smallint, e.g. '40000'" in message
    assert "column price (numeric): 2 value(s) cannot be typed as decimal(5,2)" in message
    assert "column amount (numeric): 1 value(s)" in message and "'0.1234567891'" in message
    assert "column born (date): 2 value(s)" in message and "no infinite" in message
    assert "column local_ts (timestamp): 1 value(s)" in message
    assert "column at (timestamptz): 1 value(s)" in message
    assert "column ints (_int4): 4 value(s)" in message and "one-dimensional" in message
    assert all(f"column {c.name} " in message for c in columns)
    assert raised.value.exit_code == 4


def test_unknown_type_is_text_with_one_warning_per_column(spark, caplog):
    source = spark.createDataFrame([("happy",)], "mood string")
    columns = [col("mood", "mood")]
    with caplog.at_level(logging.WARNING, logger="pipelines.silver.types"):
        typed_columns(source, columns, table="public.warned_once")
        typed_columns(source, columns, table="public.warned_once")
    assert [r.getMessage() for r in caplog.records] == [
        "public.warned_once.mood: Postgres type 'mood' is not in the type map (an enum, a "
        "domain or an extension type?); kept as the text Postgres renders"]


def test_columns_must_exist_and_be_text(spark):
    source = spark.createDataFrame([(1, "x")], "n int, s string")
    with pytest.raises(ValueError, match=r"\['missing'\] are not in the DataFrame"):
        typed_columns(source, [col("missing", "int4")])
    with pytest.raises(ValueError, match="must hold Postgres text"):
        typed_columns(source, [col("n", "int4")])
