"""Small DataFrames of rows the driver holds: a batch's chunk windows, an empty relation.

On a classic driver `spark.createDataFrame(list)` is an RDD of pickled rows, so every
job that reads it (a broadcast, a write) starts Python workers to unpickle them; from
an Arrow table it is a local relation the JVM reads itself (up to Spark's
`spark.sql.execution.arrow.localRelationThreshold`, 48 MB). Through Spark Connect both
are a local relation.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType
                ) -> DataFrame:
    """`rows` (tuples in the order of `schema`'s fields) as a local relation."""
    names = schema.fieldNames()
    data = pa.Table.from_pylist([dict(zip(names, row)) for row in rows],
                                schema=to_arrow_schema(schema))
    return spark.createDataFrame(data, schema)


def held_frame(spark: SparkSession, frame: DataFrame) -> DataFrame:
    """`frame`'s rows computed once and held by the driver as a local relation: for a
    small frame that later steps read several times, this writes, lists and reads back
    no file, each of which is a Spark job and a commit on a classic driver."""
    return spark.createDataFrame(frame.toArrow(), frame.schema)
