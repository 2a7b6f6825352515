"""Schema evolution of a silver table: new columns, safe widenings, refused type changes.

A batch's column types come from the newest bronze rows (Relation messages). Against the
silver table each column either fits (cast the batch to the table's type), needs the
table widened (int4 -> int8, float4 -> float8, a larger numeric: rewrite the column,
values unchanged), is new (MERGE WITH SCHEMA EVOLUTION adds it), or changed in a way no
cast keeps every value (text -> int, int -> text, ...): that table stops with a
DataError naming the column; the other tables go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pyspark.sql.types import (
    ArrayType, DataType, DecimalType, DoubleType, FloatType, IntegerType, LongType,
    ShortType, StructField, StructType)

from pipelines.errors import DataError

_INTEGER_DIGITS = {ShortType(): 5, IntegerType(): 10, LongType(): 19}
_WIDER = {ShortType(): (IntegerType(), LongType()), IntegerType(): (LongType(),),
          FloatType(): (DoubleType(),)}


def fits(source: DataType, target: DataType) -> bool:
    """Every value of `source` converts to `target` exactly."""
    if source == target:
        return True
    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        return fits(source.elementType, target.elementType)
    if isinstance(target, DecimalType):
        if isinstance(source, DecimalType):
            return (target.scale >= source.scale
                    and target.precision - target.scale >= source.precision - source.scale)
        digits = _INTEGER_DIGITS.get(source)
        return digits is not None and target.precision - target.scale >= digits
    return target in _WIDER.get(source, ())


@dataclass(frozen=True)
class SchemaPlan:
    """How a batch meets its silver table."""

    casts: dict[str, DataType] = field(default_factory=dict)  # batch column -> table type
    widen: dict[str, DataType] = field(default_factory=dict)  # table column -> wider type
    new: tuple[StructField, ...] = ()  # columns the table does not have yet

    def final_schema(self, target: StructType) -> StructType:
        """The table's schema once widened and evolved."""
        fields = [StructField(f.name, self.widen.get(f.name, f.dataType), True)
                  for f in target.fields]
        return StructType(fields + list(self.new))


def plan_schema(table: str, target: StructType, batch: Sequence[StructField]) -> SchemaPlan:
    """Compare the batch's typed columns with the silver table's; DataError if unsafe."""
    existing = {f.name: f.dataType for f in target.fields}
    casts, widen, new = {}, {}, []
    for column in batch:
        current = existing.get(column.name)
        if current is None:
            new.append(StructField(column.name, column.dataType, True))
        elif column.dataType == current:
            continue
        elif fits(column.dataType, current):
            casts[column.name] = current
        elif fits(current, column.dataType):
            widen[column.name] = column.dataType
        else:
            raise DataError(
                f"{table}: column {column.name} changed type from "
                f"{current.simpleString()} (silver) to {column.dataType.simpleString()} "
                "(source), which silver cannot widen without losing values. This table "
                "is stopped, the others go on. Rebuild it from bronze: delete its silver "
                "table and tombstones (lakehouse silver --rebuild TABLE)")
    return SchemaPlan(casts, widen, tuple(new))
