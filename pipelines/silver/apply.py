"""One table's silver batch: plan (reading only), stage (the transforms, run once),
write (DDL, MERGE into silver, then into its tombstones, then history).

A batch no row describes (a bare truncate) only moves the table's floor: every table of
it loses what is at or below.
"""

from __future__ import annotations

from pipelines.errors import DataError
from pipelines.names import split_table
from pipelines.positions import Position
from pipelines.silver import history_tables
from pipelines.silver.plan import plan_batch, table_floor
from pipelines.silver.progress import TableProgress
from pipelines.silver.scan import TableScan
from pipelines.silver.stage import stage_batch
from pipelines.silver.tables import SilverContext, truncate
from pipelines.silver.write import Applied, write_batch


def apply_table(run: SilverContext, table: TableScan, before: TableProgress, upto: Position,
                newest_commit_micros: int | None, replace_tables: bool = False) -> Applied:
    """Apply one table's new bronze (after before.position, up to `upto`) to silver."""
    if table.shape_error or table.window_error:
        raise DataError(table.shape_error or table.window_error)
    plan = plan_batch(run, table, before, upto, replace_tables)
    if plan is None:
        return _bare_truncate(run, table, before)
    return write_batch(run, plan, stage_batch(run, plan), newest_commit_micros)


def _bare_truncate(run: SilverContext, table: TableScan, before: TableProgress) -> Applied:
    """A batch of truncates only: delete at or below the new floor, close history."""
    floor = table_floor(table, before)
    if floor is not None and floor != before.floor:
        schema, name = split_table(table.name)
        for target in (run.names.silver(schema, name), run.names.tombstones(schema, name)):
            truncate(run, target, floor)
        if run.keeps_history(table.name):
            history_tables.close(run, table)
    return Applied(floor)
