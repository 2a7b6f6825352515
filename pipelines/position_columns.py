"""The engine's twins of pipelines.positions: the order of positions as Spark Columns and
as SQL text (for MERGE conditions), and the sortable number as DECIMAL(38,0).

Every comparison of positions in a DataFrame or a statement is built here, so that the
order the engine applies is the one Python tuples apply.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from pipelines.positions import INDEX_DIGITS, Position, position_number

POSITION_TYPE = DecimalType(38, 0)


def is_after(lsn: Column, change_index: Column, than_lsn: Column,
             than_change_index: Column) -> Column:
    """Position (lsn, change_index) strictly after (than_lsn, than_change_index)."""
    return (lsn > than_lsn) | ((lsn == than_lsn) & (change_index > than_change_index))


def is_after_position(lsn: Column, change_index: Column, position: Position) -> Column:
    """(lsn, change_index) strictly after the literal `position`."""
    return is_after(lsn, change_index, F.lit(position[0]), F.lit(position[1]))


def is_before_position(lsn: Column, change_index: Column, position: Position,
           inclusive: bool = False) -> Column:
    """(lsn, change_index) before the literal `position` (or at it, when `inclusive`)."""
    last = (change_index <= F.lit(position[1]) if inclusive
            else change_index < F.lit(position[1]))
    return (lsn < F.lit(position[0])) | ((lsn == F.lit(position[0])) & last)


def is_within(lsn: Column, change_index: Column, after_position: Position,
           upto: Position) -> Column:
    """(lsn, change_index) in (after_position, upto]."""
    return (is_after_position(lsn, change_index, after_position)
            & is_before_position(lsn, change_index, upto, inclusive=True))


def sql_is_after(lsn: str, change_index: str, than_lsn: str, than_change_index: str) -> str:
    """SQL: position (lsn, change_index) strictly after (than_lsn, than_change_index),
    each an SQL expression."""
    return (f"({lsn} > {than_lsn} OR ({lsn} = {than_lsn} "
            f"AND {change_index} > {than_change_index}))")


def sql_before(lsn: str, change_index: str, position: Position, inclusive: bool = False) -> str:
    """SQL: (lsn, change_index) before the literal `position` (or at it, when `inclusive`)."""
    at, index = position
    return (f"({lsn} < {at} OR ({lsn} = {at} AND "
            f"{change_index} {'<=' if inclusive else '<'} {index}))")


def sql_number(position: Position | int) -> str:
    """SQL: the sortable number of a position as a DECIMAL(38,0) literal, from its digits:
    no integer type holds it once the LSN passes 2^63 / 10^10 (~922 MB of WAL)."""
    number = position if isinstance(position, int) else position_number(position)
    return f"CAST('{number}' AS DECIMAL(38,0))"


def number_literal(position: Position | int) -> Column:
    """The sortable number of a position (or the number itself) as a literal."""
    number = position if isinstance(position, int) else position_number(position)
    return F.lit(str(number)).cast(POSITION_TYPE)


def number_column(lsn: Column, change_index: Column) -> Column:
    """The sortable number computed in the engine, built from digits: no decimal
    arithmetic, which the engines round and overflow differently (docs/architecture.md,
    rule 5)."""
    return F.concat(lsn.cast("string"), F.lpad(change_index.cast("string"), INDEX_DIGITS, "0")
                    ).cast(POSITION_TYPE)
