"""`run_silver`: one incremental silver run over the tables in scope.

Scan bronze for what is new per table, apply each table's batch (apply.py), then record
progress once, after the MERGE statements of all tables. A table that fails with a
DataError (an unsafe type change, corrupt rows) is reported and keeps its progress;
the other tables go on. Where each silver table is comes from pipelines.catalog.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Sequence

from pyspark.sql import SparkSession

from pipelines.bronze.generations import Registry, generation_starts
from pipelines.bronze.landed import newest_position
from pipelines.catalog import TableNames, TableRef, table_exists
from pipelines.config import Config, configured_tables
from pipelines.errors import DataError
from pipelines.lake import Lake, TableLocation
from pipelines.names import qualify_table, split_table
from pipelines.positions import Position, format_lsn
from pipelines.silver.apply import apply_table
from pipelines.silver.bronze_batch import may_prove_chunks
from pipelines.silver.maintenance import maintenance_for
from pipelines.silver.progress import (
    START, Progress, TableProgress, read_progress, write_progress)
from pipelines.silver.run_metrics import record_silver_run
from pipelines.silver.scan import (
    BronzeScan, TableScan, lower_bounds, scan_bronze)
from pipelines.silver.tables import SilverContext
from pipelines.spark_jobs import map_in_threads

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class TableReport:
    """What one run did to one silver table (bronze row counts, not MERGE metrics)."""

    table: str
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    truncated: bool = False
    chunks: int = 0
    columns_added: tuple[str, ...] = ()
    columns_widened: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = field(default=0.0, compare=False)  # spent applying it: not what it did


@dataclass(frozen=True)
class SilverRunReport:
    """One silver run: the bronze position applied up to and each table touched."""

    upto: Position | None
    tables: tuple[TableReport, ...] = ()
    seconds: float = 0.0

    @property
    def failed(self) -> tuple[TableReport, ...]:
        return tuple(t for t in self.tables if t.error)


def run_silver(config: Config, spark: SparkSession, tables: Sequence[str] | None = None,
               rebuild: Sequence[str] = ()) -> SilverRunReport:
    """Apply the bronze that is new since the last run to every table in scope.

    tables: limit the run to these (schema.table, or a name in public); rebuild: tables
    to rebuild from all of bronze (their silver and tombstone tables are replaced).
    """
    started = time.monotonic()
    names = TableNames.from_config(config)
    lake = names.lake
    scope = configured_tables(config, list(tables or []) + list(rebuild) or None)
    rebuild = [qualify_table(t) for t in rebuild]
    if not lake.bronze_changes.exists():
        log.info("silver: no bronze yet at %s", lake.bronze_changes)
        return SilverRunReport(None)
    progress, rebuild = _start_progress(config, spark, names, scope, rebuild)
    if not rebuild and _nothing_new(lake, progress, scope):
        report = SilverRunReport(None, (), time.monotonic() - started)
        record_silver_run(report.tables)
        return report
    maintenance = maintenance_for(config, spark)
    maintenance.register_all(spark, lake)
    run = SilverContext(spark, lake, maintenance,
                        timedelta(hours=config.silver.tombstone_retention_hours), names,
                        generation_starts(Registry(lake).all()),
                        lambda table: history_of(config, table))
    reports: dict[str, TableReport] = {}
    upto = None
    while True:  # one pass per slice; all new bronze unless it exceeds max_batch_rows
        replaced = set(rebuild) - set(reports)
        scan, bounds = _scan_slice(run, config, progress, scope, reports, replaced)
        if scan.upto is None:
            break
        # Every table was scanned to here (a slice held back by a stopped table may end
        # before an earlier run's mark: that mark stands).
        scanned = max(scan.upto, progress.scanned) if tables is None and not rebuild else None
        progress = _apply_slice(run, config, scan, progress, bounds, scanned, replaced,
                                reports)
        upto = scan.upto
        if not scan.sliced:
            break
    report = SilverRunReport(upto, tuple(reports[name] for name in sorted(reports)),
                             time.monotonic() - started)
    record_silver_run(report.tables)
    return report


def _start_progress(config: Config, spark: SparkSession, names: TableNames,
                    scope: Sequence[str] | None, rebuild: list[str]
                    ) -> tuple[Progress, list[str]]:
    """The progress the run starts from, and every table it rebuilds (those asked for
    and those whose history was just turned on), whose intent is recorded first: a crash
    mid-rebuild must not resume half-way."""
    progress = read_progress(names.lake.silver_progress)
    rebuild = rebuild + _histories_to_build(config, spark, names, progress, scope, rebuild)
    if rebuild:
        restart = {t: TableProgress(START) for t in rebuild}
        write_progress(names.lake.silver_progress, restart, None)
        progress = replace(progress, tables={**progress.tables, **restart})
    return progress, rebuild


def _nothing_new(lake: Lake, progress: Progress, scope: Sequence[str] | None) -> bool:
    """Whether bronze holds nothing past every table's progress, as its log's commits
    record it (delta-rs): a run with nothing to do starts no Spark job."""
    bounds, default = lower_bounds(progress, scope)
    newest = newest_position(lake.bronze_changes)
    return newest is not None and newest <= min([default, *bounds.values()])


def _scan_slice(run: SilverContext, config: Config, progress: Progress,
                scope: Sequence[str] | None, reports: dict[str, TableReport],
                replaced: set[str]) -> tuple[BronzeScan, dict[str, Position]]:
    """Scan the next slice of new bronze (all of it unless it exceeds max_batch_rows),
    and the position each table starts from. replaced: the tables this pass writes anew
    (as _apply_slice)."""
    bounds, default = lower_bounds(progress, scope)
    stopped = {name for name, report in reports.items() if report.error}

    def streams_chunks(table: TableScan) -> bool:
        """A new table's first batch writes chunk rows proven one per key as it reads
        them (no MERGE, no ordering): they are not held in memory, so a first load after
        a large backfill is one batch (docs/silver.md, Large backlogs)."""
        return may_prove_chunks(run, table) and (
            table.name in replaced
            or not run.exists(run.names.silver(*split_table(table.name))))

    scan = scan_bronze(run.lake.bronze_changes, lambda: run.changes, bounds, default, scope,
                       max_rows=config.silver.max_batch_rows,
                       excluded=stopped,  # not counted, nor scanned, again in this run
                       generation_starts=run.generation_starts,
                       streams_chunks=streams_chunks)
    if scan.sliced:
        log.info("silver: more new bronze than silver.max_batch_rows (%d rows); applying "
                 "a slice up to commit LSN %s", config.silver.max_batch_rows,
                 format_lsn(scan.upto[0]))
    return scan, bounds


def _apply_slice(run: SilverContext, config: Config, scan: BronzeScan, progress: Progress,
                 bounds: dict[str, Position], scanned: Position | None, replaced: set[str],
                 reports: dict[str, TableReport]) -> Progress:
    """Apply one slice to every table, record its progress, maintain the tables; add
    each table's report to `reports`. Returns the progress after it."""
    configured = configured_tables(config, None)  # not --table: a clash can span runs
    clashes = run.names.silver_clashes(configured if configured is not None
                                       else [*progress.tables, *scan.tables])
    slice_reports, new_progress = _apply_scan(run, scan, progress, bounds, clashes, replaced,
                                              config.silver.parallel_tables)
    write_progress(run.lake.silver_progress, new_progress, scanned)
    _maintain(run, [r.table for r in slice_reports if not r.error], run.lake.silver_progress)
    for report in slice_reports:
        reports[report.table] = _combined(reports.get(report.table), report)
    return Progress({**progress.tables, **new_progress}, scanned or progress.scanned)


def _apply_scan(run: SilverContext, scan: BronzeScan, progress: Progress,
                bounds: dict[str, Position], clashes: dict[str, list[str]],
                replaced: set[str], parallel: int
                ) -> tuple[list[TableReport], dict[str, TableProgress]]:
    """Apply each table's part of one scan, `parallel` tables at a time: reports, and
    the progress to record.

    Tables are independent (their own Delta tables, staging and source views), so their
    batches may run at once: an engine's jobs are mostly fixed latency (a classic
    driver's planning, a cluster's scheduling, an object store's round trips), which
    other tables' jobs fill. replaced: tables whose silver and tombstone tables this
    pass replaces (a rebuild's first pass).
    """
    work = [name for name in sorted(scan.tables) if scan.tables[name].has_work]

    def apply_one(name: str) -> tuple[TableReport, TableProgress]:
        return _apply_one(run, scan, name, progress.of(name), clashes, name in replaced)

    applied = map_in_threads(run.spark, apply_one, work, parallel, "silver")
    reports = [report for report, _ in applied]
    new_progress = {name: table for name, (_, table) in zip(work, applied)}
    # A table with nothing new up to scan.upto moves up, unless an error stopped it or a
    # rebuild has not replaced it yet (an interrupted run must start that one over).
    for name in set(bounds) & set(progress.tables) - set(new_progress) - replaced:
        before = progress.tables[name]
        if before.error is None and before.position < scan.upto:
            new_progress[name] = replace(before, position=scan.upto)
    return reports, new_progress


def _apply_one(run: SilverContext, scan: BronzeScan, name: str, before: TableProgress,
               clashes: dict[str, list[str]], replace_tables: bool
               ) -> tuple[TableReport, TableProgress]:
    """Apply one table's batch: its report and the progress to record (a DataError
    stops the table, which keeps its progress, with the error)."""
    table = scan.tables[name]
    started = time.monotonic()
    try:
        if name in clashes:
            raise DataError(clash_error(name, run.names, clashes[name]))
        applied = apply_table(run, table, before, scan.upto, scan.newest_commit_micros,
                              replace_tables=replace_tables)
    except DataError as exc:
        log.debug("silver %s stopped: %s", name, exc)
        return TableReport(name, error=str(exc)), replace(before, error=str(exc))
    return (TableReport(table.name, table.inserts, table.updates, table.deletes,
                        table.truncate is not None, len(table.windows),
                        applied.columns_added, applied.columns_widened,
                        seconds=time.monotonic() - started),
            TableProgress(scan.upto, applied.floor))


def _maintain(run: SilverContext, tables: Sequence[str], progress_path: TableLocation) -> None:
    """After the progress is recorded (the run's changes are visible already): compact
    the tables this run merged into once they have many small files, and keep their
    Delta logs short (pipelines.lake.LOG_RETENTION)."""
    for name in tables:
        schema, table = split_table(name)
        targets = [run.names.silver(schema, table), run.names.tombstones(schema, table)]
        if run.keeps_history(name):
            targets.append(run.names.history(schema, table))
        for target in targets:
            run.maintenance.compact(run.spark, target)
            run.maintenance.trim_log(target)
    run.maintenance.trim_log(TableRef(path=progress_path))


def _combined(earlier: TableReport | None, later: TableReport) -> TableReport:
    """One table's report over the slices of a run."""
    if earlier is None:
        return later
    return TableReport(later.table, earlier.inserts + later.inserts,
                       earlier.updates + later.updates, earlier.deletes + later.deletes,
                       earlier.truncated or later.truncated, earlier.chunks + later.chunks,
                       earlier.columns_added + later.columns_added,
                       earlier.columns_widened + later.columns_widened,
                       earlier.error or later.error, earlier.seconds + later.seconds)


def _histories_to_build(config: Config, spark: SparkSession, names: TableNames,
                        progress: Progress, scope: Sequence[str] | None,
                        rebuild: Sequence[str]) -> list[str]:
    """Tables whose history was just turned on: silver exists, its history not. They
    are rebuilt from all of bronze, so their history starts where bronze does."""
    found = []
    for table in sorted(progress.tables):
        if table in rebuild or (scope is not None and table not in scope) \
                or not config.silver.keeps_history(table):
            continue
        schema, name = split_table(table)
        if table_exists(spark, names.silver(schema, name)) \
                and not table_exists(spark, names.history(schema, name)):
            log.info("silver %s: history turned on; rebuilding the table and its history "
                     "from all of bronze", table)
            found.append(table)
    return found


def history_of(config: Config, table: str) -> tuple[str, ...] | None:
    """A table's tracked columns if it keeps history (() for every column), else None."""
    if not config.silver.keeps_history(table):
        return None
    return config.silver.tracked_columns(table) or ()


def clash_error(table: str, names: TableNames, others: Sequence[str]) -> str:
    """Why a table that shares its silver table with others is not applied."""
    return (f"its silver table {names.silver(*split_table(table))} would also hold "
            f"{', '.join(others)}; leave all but one of them out of source.tables")
