"""Silver's incremental run on Sail and on classic Spark vs a delta-rs MERGE of the same
rows, as the table grows.

For each table size N the lake holds bronze with N inserts of a narrow table
(public.bench: id int8 key, name text, amount numeric(12,2), qty int4, active bool,
updated_at timestamptz) and the silver table with those N rows, built once per N
(--initial: by one run_silver of that bronze, or "direct": the pipeline creates the
tables from the first transaction, delta-rs appends the other rows' typed values and the
pipeline's write_progress records the load's last position; auto: run_silver up to 1M
rows). For each batch size M, a copy of that lake gets M more changes in bronze (--shape
recent, the default: 40% inserts, 50% updates and 10% deletes of the newest 20,000 ids,
the same working set at every table size, so only the table grows;
uniform: 60% updates, 20% deletes, 20% inserts of random keys; increasing positions,
50k-row commits like the ingest's; with --toast-share F, that share of the updates leaves `name`
unchanged, as Postgres does for a TOASTed value an UPDATE did not touch), then, each in
its own child process, one after the other (--engines picks them; with --repeat R the
runs of a case alternate: Sail, Spark, delta-rs, Sail, Spark, delta-rs..., and so do the
table sizes: every size's first run, then every size's second...):

- silver on Sail: ONE incremental `run_silver` on the local engine (Sail, in-process):
  seconds, changes/s (bronze changes per second), the child's peak RSS (VmHWM: Python
  and the Sail server, which runs in the same process) and the seconds of every Spark
  Connect request by what made it (a MERGE by its target, else the pipeline function);
- silver on Spark: the same `run_silver` on classic Spark with Delta Lake (the `spark`
  engine, master local[2]), on an identical copy of the lake (same bronze, same silver
  before the batch): seconds and changes/s as above, the session's start-up apart (the
  JVM's launch and Ivy's resolution of the Delta jars: not in the seconds), the peak
  RSS of the Python process and of its JVM, and the seconds of the job's steps;
- delta-rs: `DeltaTable.merge` of the batch's latest event per key (the rows silver ends
  up merging, already typed) into an identical copy of the N-row silver table (the same
  files), with silver's position guard: seconds, peak RSS and the merge's metrics;
- MERGE alone (with Sail, with Spark): silver's own MERGE statement, on that engine, of
  those same rows into another identical copy: what the engine's MERGE costs without
  the pipeline's steps, the floor of a run on it.

Each engine's run is a fresh process's first (a one-shot job's); with --warm, Sail's and
Spark's processes first apply a small batch to a scratch lake, so the measured run is a
warm driver's, as in a long-running `lakehouse run` (a fresh JVM's first queries are
slow while it loads and compiles its classes).

The engines' tables are then compared row for row with the first's (they must be
equal). The 1-minute load average (what `uptime` shows) is recorded around every timed
run: the machine is shared. The report lists every run, then every case's medians with
the engines side by side.

    python -m bench.silver_bench [--table-rows 1000000 10000000] [--changes 100000 1000000]
                                 [--repeat 2] [--engines sail spark deltars]
                                 [--initial auto|silver|direct]
                                 [--shape recent|uniform] [--toast-share 0.3]
                                 [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import table, timed, work_and_results
from pipelines.bronze.schema import CHANGES_SCHEMA

TABLE = "public.bench"
COLUMNS = ("id", "name", "amount", "qty", "active", "updated_at")
TYPES = ("int8", "text", "numeric", "int4", "bool", "timestamptz")
MODS = (-1, -1, ((12 << 16) | 2) + 4, -1, -1, -1)  # numeric(12,2): atttypmod
UTC = pa.timestamp("us", tz="UTC")
SILVER_SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(12, 2)),
    ("qty", pa.int32()), ("active", pa.bool_()), ("updated_at", UTC),
    ("_lsn", pa.int64()), ("_change_index", pa.int64()), ("_commit_ts", UTC)])
TXN_ROWS = 10  # changes per source transaction
LSN_GAP = 4096  # between the commit LSNs of consecutive transactions
EPOCH_US = int(datetime(2026, 1, 5, 8, tzinfo=timezone.utc).timestamp() * 1_000_000)
INGEST_COMMIT_ROWS = 50_000  # the ingest's batch_rows: one bronze commit per 50k changes
INITIAL_COMMIT_ROWS = 1_000_000
DIRECT_FILE_ROWS = 1_000_000  # --initial direct: rows per silver file (see build_direct)
BUILD_ROWS = 5_000_000  # --initial direct: rows generated at a time
RECENT_IDS = 20_000  # --shape recent: the newest ids a batch updates and deletes
UPDATE, DELETE, INSERT = 0, 1, 2
ENGINES = ("sail", "spark", "deltars")  # --engines, in the order each run of a case runs them
LABELS = {"sail": "Sail", "spark": "Spark", "deltars": "delta-rs"}
SPARK_MASTER = "local[2]"  # classic Spark's driver threads: the machine's 2 cores


# --- data ----------------------------------------------------------------------------------

def _decimal(cents: np.ndarray) -> pa.Array:
    """int64 cents as decimal128(12,2), exactly (the unscaled 128-bit integers)."""
    words = np.empty((len(cents), 2), dtype=np.int64)
    words[:, 0], words[:, 1] = cents, cents >> 63
    return pa.Array.from_buffers(pa.decimal128(12, 2), len(cents),
                                 [None, pa.py_buffer(words.tobytes())])


def typed_rows(ids: np.ndarray, version: int, rng: np.random.Generator,
               commit_us: np.ndarray) -> dict[str, pa.Array]:
    """The source rows' typed values (what silver must hold for them)."""
    n = len(ids)
    id_text = pc.cast(pa.array(ids), pa.string())
    return {
        "id": pa.array(ids, pa.int64()),
        "name": pc.binary_join_element_wise("user-", id_text, f"-v{version}", ""),
        "amount": _decimal(rng.integers(-1_000_000, 10_000_000_000, n)),
        "qty": pa.array(rng.integers(0, 10_000, n).astype(np.int32)),
        "active": pa.array(rng.random(n) < 0.8),
        "updated_at": pa.array(commit_us - rng.integers(0, 1_000_000, n)).cast(UTC),
    }


def postgres_text(typed: dict[str, pa.Array]) -> list[pa.Array]:
    """The values as Postgres renders them in text format (what ingest lands)."""
    return [pc.cast(typed["id"], pa.string()), typed["name"],
            pc.cast(typed["amount"], pa.string()), pc.cast(typed["qty"], pa.string()),
            pc.if_else(typed["active"], "t", "f"),
            pc.binary_join_element_wise(pc.strftime(typed["updated_at"], "%Y-%m-%d %H:%M:%S"),
                                        "+00", "")]


def positions(first_txn: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """commit_lsn, change_index, xid and commit time (us) of n changes in TXN_ROWS-row
    transactions, the first being transaction number `first_txn`."""
    txn = first_txn + np.arange(n, dtype=np.int64) // TXN_ROWS
    return (txn * LSN_GAP, np.arange(n, dtype=np.int64) % TXN_ROWS, txn,
            EPOCH_US + txn * 1_000)


def _repeat(value: pa.Array, n: int) -> pa.Array:
    return value.take(pa.array(np.zeros(n, dtype=np.int64)))


def _lists(columns: list[pa.Array], mask: np.ndarray | None = None) -> pa.ListArray:
    """Row i -> [columns[0][i], columns[1][i], ...] (null lists where mask)."""
    n, width = len(columns[0]), len(columns)
    order = (np.arange(width, dtype=np.int64)[None, :] * n
             + np.arange(n, dtype=np.int64)[:, None]).ravel()
    flat = pa.concat_arrays([c.cast(pa.string()) for c in columns]).take(pa.array(order))
    offsets = pa.array(np.arange(0, width * (n + 1), width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat,
                                    mask=None if mask is None else pa.array(mask))


def bronze_changes(kinds: np.ndarray, ids: np.ndarray, text: list[pa.Array],
                   first_txn: int, toast: np.ndarray | None = None) -> pa.Table:
    """bronze/changes rows (CHANGES_SCHEMA) of one table's inserts/updates/deletes, in order.

    Updates send the full new row, except `name` where `toast` (unchanged TOAST); deletes
    the old key only (replica identity default)."""
    n = len(ids)
    lsn, index, xid, commit_us = positions(first_txn, n)
    deleted = kinds == DELETE
    toast = np.zeros(n, dtype=bool) if toast is None else toast
    null_text = pa.nulls(n, pa.string())
    values = _lists([pc.if_else(pa.array(deleted | (toast & (i == COLUMNS.index("name")))),
                                null_text, t) for i, t in enumerate(text)])
    old_values = _lists([text[0]] + [null_text] * (len(COLUMNS) - 1), mask=~deleted)
    ops = np.array(["update", "delete", "insert"], dtype=object)[kinds]
    text_list = pa.list_(pa.string())
    shape = {
        "schema_name": _repeat(pa.array(["public"]), n),
        "table_name": _repeat(pa.array(["bench"]), n),
        "columns": _repeat(pa.array([list(COLUMNS)], text_list), n),
        "type_names": _repeat(pa.array([list(TYPES)], text_list), n),
        "type_oids": _repeat(pa.array([[0] * len(COLUMNS)], pa.list_(pa.int64())), n),
        "type_mods": _repeat(pa.array([list(MODS)], pa.list_(pa.int32())), n),
        "key_columns": _repeat(pa.array([["id"]], text_list), n),
    }
    columns = {
        "commit_lsn": pa.array(lsn), "change_index": pa.array(index), "xid": pa.array(xid),
        "commit_ts": pa.array(commit_us).cast(UTC), "op": pa.array(ops, pa.string()),
        **shape, "values": values,
        "unchanged_toast": pa.ListArray.from_arrays(
            pa.array(np.r_[0, np.cumsum(toast)].astype(np.int32)),
            _repeat(pa.array(["name"]), int(toast.sum()))),
        "old_kind": pc.if_else(pa.array(deleted), "K", pa.nulls(n, pa.string())),
        "old_values": old_values,
        "ingested_at": _repeat(pa.array([EPOCH_US]).cast(UTC), n),
    }
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type)
              for f in CHANGES_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=CHANGES_SCHEMA)


def append_bronze(lake: Path, rows: pa.Table, commit_rows: int) -> None:
    from deltalake import write_deltalake

    for start in range(0, rows.num_rows, commit_rows):
        write_deltalake(str(lake / "bronze" / "changes"), rows.slice(start, commit_rows),
                        mode="append")


def initial_rows(n: int, seed: int, start: int = 0) -> tuple[pa.Table, dict[str, pa.Array]]:
    """Bronze inserts of ids start+1..start+n (from transaction 1 + start / TXN_ROWS on;
    `start` a multiple of TXN_ROWS) and the typed rows they become."""
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start + 1, start + n + 1, dtype=np.int64)
    first_txn = 1 + start // TXN_ROWS
    lsn, index, _, commit_us = positions(first_txn, n)
    typed = typed_rows(ids, 0, rng, commit_us)
    bronze = bronze_changes(np.full(n, INSERT, dtype=np.int8), ids, postgres_text(typed),
                            first_txn)
    typed.update(_lsn=pa.array(lsn), _change_index=pa.array(index),
                 _commit_ts=pa.array(commit_us).cast(UTC))
    return bronze, typed


def batch_rows(n: int, m: int, seed: int, toast_share: float = 0.0, shape: str = "recent"
               ) -> tuple[pa.Table, pa.Table]:
    """M changes against ids 1..n, shuffled, at positions after the initial load.

    `recent`: 40% inserts of new ids, 50% updates and 10% deletes of the newest ids (the
    newest RECENT_IDS, or twice the deletes if that is more: a fixed working set, as an
    OLTP table's hot rows are, so a batch's work is the same at every n). `uniform`: 20%
    inserts, 60% updates and 20% deletes of keys anywhere. Updates draw keys with
    replacement (hot keys are updated more than once; `toast_share` of them leave `name`
    unchanged); deletes are distinct keys, never updated in the batch. Returns the bronze
    rows and the latest event per key (typed, with _cdc_op, unchanged names resolved):
    the delta-rs MERGE source."""
    rng = np.random.default_rng(seed)
    if shape == "uniform":
        n_del, n_ins, first = m // 5, m // 5, 1
    else:
        n_del, n_ins = m // 10, 2 * m // 5
        first = max(1, n + 1 - max(RECENT_IDS, 2 * n_del))
    n_upd = m - n_del - n_ins
    deleted = rng.choice(np.arange(first, n + 1), n_del, replace=False)
    alive = np.zeros(n + 1, dtype=bool)
    alive[first:] = True
    alive[deleted] = False
    live = np.flatnonzero(alive)
    updated = live[rng.integers(0, len(live), n_upd)]
    inserted = np.arange(n + 1, n + 1 + n_ins, dtype=np.int64)
    kinds = np.concatenate([np.full(n_upd, UPDATE), np.full(n_del, DELETE),
                            np.full(n_ins, INSERT)]).astype(np.int8)
    ids = np.concatenate([updated, deleted, inserted]).astype(np.int64)
    order = rng.permutation(m)
    kinds, ids = kinds[order], ids[order]
    first_txn = 1 + (n + TXN_ROWS - 1) // TXN_ROWS + 1
    lsn, index, _, commit_us = positions(first_txn, m)
    typed = typed_rows(ids, 1, rng, commit_us)
    toast = (kinds == UPDATE) & (rng.random(m) < toast_share)
    bronze = bronze_changes(kinds, ids, postgres_text(typed), first_txn, toast)

    # latest event per key: stable sort by id keeps position order inside a key
    by_key = np.argsort(ids, kind="stable")
    ends = np.r_[ids[by_key][1:] != ids[by_key][:-1], True]
    last = by_key[ends]
    take = pa.array(last)
    deletes = pa.array(kinds[last] == DELETE)
    source = {c: typed[c].take(take) for c in COLUMNS}
    # an unchanged name is the batch's earlier one (every update of a key in the batch
    # sends the same "-v1" name) or, when no earlier event sent one, the initial "-v0"
    sent = np.cumsum(~toast[by_key])
    starts = np.flatnonzero(np.r_[True, ends[:-1]])
    sent_before_last = sent[ends] - (~toast[last]) - (sent[starts] - ~toast[by_key][starts])
    initial = pc.binary_join_element_wise(
        "user-", pc.cast(source["id"], pa.string()), "-v0", "")
    source["name"] = pc.if_else(pa.array(toast[last] & (sent_before_last == 0)), initial,
                                source["name"])
    for c in COLUMNS[1:]:  # a delete carries the key only
        source[c] = pc.if_else(deletes, pa.nulls(len(last), source[c].type), source[c])
    source.update(_lsn=pa.array(lsn[last]), _change_index=pa.array(index[last]),
                  _commit_ts=pa.array(commit_us[last]).cast(UTC),
                  _cdc_op=pc.if_else(deletes, "delete", "upsert"))
    return bronze, pa.table(source)


# --- child processes -------------------------------------------------------------------------

def bench_config(lake: Path, engine: str = "local"):
    from pipelines.config import Config, LakeConfig, SourceConfig, SparkConfig

    return Config(source=SourceConfig(dsn="host=unused", tables=(TABLE,)),
                  lake=LakeConfig(lake), engine=engine,
                  spark=SparkConfig(master=SPARK_MASTER))


def vm_hwm_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def jvm_pid() -> int:
    """The JVM PySpark started for this process: the java process among its descendants
    (spark-submit execs java, but a wrapper script in between would not hide it)."""
    parents, names = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended since the listing
            continue
        pid = int(stat.parent.name)
        names[pid] = text[text.index("(") + 1:text.rindex(")")]
        parents[pid] = int(text[text.rindex(")") + 2:].split()[1])

    def ours(pid: int) -> bool:
        while pid > 1 and pid != os.getpid():
            pid = parents.get(pid, 0)
        return pid == os.getpid()

    javas = [pid for pid, name in names.items() if name == "java" and ours(pid)]
    if len(javas) != 1:
        raise RuntimeError(f"expected one JVM under pid {os.getpid()}, found {javas}")
    return javas[0]


class Requests:
    """Times every Spark Connect request (execute or analyze) by what made it: a MERGE
    statement by its target table, anything else by the innermost pipeline function
    on the stack (module.function:line). Where a run's seconds go."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def install(self) -> None:
        from pyspark.sql.connect.client.core import SparkConnectClient

        for method in ("_execute_and_fetch", "_analyze"):
            original = getattr(SparkConnectClient, method)
            setattr(SparkConnectClient, method, self._wrap(original, method.strip("_")))

    def _wrap(self, original, kind):
        calls = self.calls

        def timed_request(client, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(client, *args, **kwargs)
            finally:
                calls.append((_label(args), kind, time.perf_counter() - started))
        return timed_request


def _label(args: tuple) -> str:
    plan = getattr(args[0], "plan", None) if args else None
    if plan is not None and plan.HasField("command") and plan.command.HasField("sql_command"):
        text = str(plan.command.sql_command)
        if "MERGE" in text:
            target = ("tombstones" if "silver_tombstones" in text
                      else "history" if "silver_history" in text else "silver")
            return f"MERGE INTO {target}"
    frame = sys._getframe(3)
    while frame is not None:
        path = frame.f_code.co_filename
        if f"{os.sep}pipelines{os.sep}" in path:
            return f"{Path(path).stem}.{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return "bench"


def time_calls(steps: list[tuple[str, float]], calls: dict[str, tuple[object, str]]) -> None:
    """Replace module functions by timed ones: every call appends (step, seconds) to
    `steps`. calls: step -> (module, function name), looked up at call time by its callers."""
    for step, (module, name) in calls.items():
        original = getattr(module, name)

        def timed_call(*args, _original=original, _step=step, **kwargs):
            begun = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                steps.append((_step, time.perf_counter() - begun))
        setattr(module, name, timed_call)


def timed_run_silver(config, spark) -> dict:
    """One run_silver with the job's steps timed (where a run's seconds go, on any engine):
    its seconds, the steps and what it applied per table."""
    from pipelines.silver import job
    from pipelines.spark_jobs import counted_jobs

    steps: list[tuple[str, float]] = []
    time_calls(steps, {name: (job, name) for name in (
        "read_progress", "scan_bronze", "apply_table", "write_progress") if hasattr(job, name)})
    begun = time.perf_counter()
    with counted_jobs(spark, "bench run_silver") as jobs:
        report = job.run_silver(config, spark)
    seconds = time.perf_counter() - begun
    assert not report.failed, report.failed
    return {"seconds": seconds, "steps": steps, "spark_jobs": jobs.jobs,
            "tables": [[t.table, t.inserts, t.updates, t.deletes] for t in report.tables]}


def warm_up(spark, lake: Path, engine: str) -> None:
    """Apply a small batch in this session first (1,000 rows, then 100 changes, in a
    scratch lake beside `lake`): the measured run is then a warm driver's, as in a
    long-running `lakehouse run`, rather than a fresh process's first."""
    from pipelines.silver import job

    scratch = lake.parent / f"warm-up-{engine}"
    shutil.rmtree(scratch, ignore_errors=True)
    append_bronze(scratch, initial_rows(1_000, 0)[0], INITIAL_COMMIT_ROWS)
    job.run_silver(bench_config(scratch, engine), spark)
    append_bronze(scratch, batch_rows(1_000, 100, 1)[0], INGEST_COMMIT_ROWS)
    job.run_silver(bench_config(scratch, engine), spark)
    shutil.rmtree(scratch, ignore_errors=True)


def phase_silver(lake: Path, out: Path, warm: bool = False) -> None:
    """One run_silver on the local engine, instrumented; results as JSON in `out`."""
    started = time.perf_counter()
    spark = _session("sail", lake)
    startup = time.perf_counter() - started
    if warm:
        warm_up(spark, lake, "local")
    rss_ready = vm_hwm_mb()
    requests = Requests()
    requests.install()
    run = timed_run_silver(bench_config(lake), spark)
    out.write_text(json.dumps({**run, "startup": startup, "rss_ready_mb": rss_ready,
                               "rss_peak_mb": vm_hwm_mb(), "requests": requests.calls}))


def phase_spark(lake: Path, out: Path, warm: bool = False) -> None:
    """One run_silver on classic Spark with Delta Lake (the `spark` engine, SPARK_MASTER),
    as phase_silver runs it on Sail. The session's start-up is timed apart: it is the
    JVM's launch and Ivy's resolution of the Delta jars, paid once per process. Peak RSS
    is this Python process's and the JVM's, read before the session stops."""
    started = time.perf_counter()
    spark = _session("spark", lake)
    startup = time.perf_counter() - started
    if warm:
        warm_up(spark, lake, "spark")
    run = timed_run_silver(bench_config(lake, "spark"), spark)
    result = {**run, "startup": startup, "rss_peak_mb": vm_hwm_mb(),
              "jvm_rss_peak_mb": vm_hwm_mb(jvm_pid())}
    spark.stop()
    out.write_text(json.dumps(result))


def phase_progress(lake: Path, lsn: int, index: int) -> None:
    """Record silver's progress of public.bench (and of the whole scan) at a position,
    with the pipeline's own write_progress: the next run applies only what follows."""
    from pipelines.lake import Lake
    from pipelines.silver.progress import TableProgress, write_progress

    write_progress(Lake.of(lake).silver_progress, {TABLE: TableProgress((lsn, index))},
                   (lsn, index))


def phase_merge(engine: str, target: Path, source: Path, out: Path, warm: bool = False) -> None:
    """Silver's MERGE statement alone, of the delta-rs source rows (nothing unchanged),
    on Sail or on classic Spark with Delta Lake (warm: after warm_up's two runs, as
    phase_silver and phase_spark): the engine's floor for a run's MERGE."""
    from pyspark.sql import functions as F

    from pipelines.silver.merge import silver_merge_sql

    spark = _session(engine, target.parent)
    if warm:
        warm_up(spark, target.parent, "local" if engine == "sail" else "spark")
    rows = spark.read.parquet(str(source)).withColumn(
        "_cdc_unchanged", F.array().cast("array<string>"))
    rows.createOrReplaceTempView("bench_source")
    sql = silver_merge_sql(f"delta.`{target}`", "bench_source", ["id"], SILVER_SCHEMA.names,
                           list(COLUMNS), unchanged=[])
    started = time.perf_counter()
    spark.sql(sql).collect()
    seconds = time.perf_counter() - started
    result = {"seconds": seconds, "rss_peak_mb": vm_hwm_mb()}
    if engine == "spark":
        result["jvm_rss_peak_mb"] = vm_hwm_mb(jvm_pid())
        spark.stop()
    out.write_text(json.dumps(result))


def _session(engine: str, where: Path):
    """A Sail session, or a classic Spark one with the bench's Spark settings."""
    if engine == "sail":
        from pipelines.engine import start_local_session

        spark = start_local_session((where / "_warehouse").resolve())
        spark.sql("SELECT 1").collect()
        return spark
    from pipelines.engine import start_classic_session

    config = bench_config(where, "spark")
    return start_classic_session((where / "_warehouse").resolve(), config.spark.master,
                                 config.spark.jars, config.spark.conf)


def phase_deltars(target: Path, source: Path, out: Path) -> None:
    """delta-rs MERGE of the latest events into a copy of the silver table."""
    from deltalake import DeltaTable

    rows = pq.read_table(source)
    newer = ("(s._lsn > t._lsn OR (s._lsn = t._lsn AND s._change_index > t._change_index))")
    values = {c: f"s.{c}" for c in SILVER_SCHEMA.names}
    started = time.perf_counter()
    metrics = (DeltaTable(str(target))
               .merge(rows, predicate="t.id = s.id", source_alias="s", target_alias="t")
               .when_matched_delete(predicate=f"s._cdc_op = 'delete' AND {newer}")
               .when_matched_update(updates={c: v for c, v in values.items() if c != "id"},
                                    predicate=f"s._cdc_op = 'upsert' AND {newer}")
               .when_not_matched_insert(updates=values, predicate="s._cdc_op = 'upsert'")
               .execute())
    seconds = time.perf_counter() - started
    out.write_text(json.dumps({"seconds": seconds, "rss_peak_mb": vm_hwm_mb(),
                               "metrics": metrics}, default=str))


# --- the parent: build, run, compare ---------------------------------------------------------

def child(*argv: str, out: Path | None = None) -> tuple[float, dict, tuple[float, float]]:
    """A child phase: wall seconds, its JSON result, the 1-minute load before and after.

    Peak RSS is the child's own VmHWM (read in the child). Not wait4's ru_maxrss: the
    child starts as a vfork of this process and keeps its high-water mark through exec,
    so ru_maxrss would report this (data-generating) parent's RSS."""
    load = os.getloadavg()[0]
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "error")}
    run = timed([sys.executable, "-m", "bench.silver_bench", *argv,
                 *(["--out", str(out)] if out else [])], env=env)
    if run.returncode != 0:
        raise SystemExit(f"child {' '.join(argv[:2])} failed with exit {run.returncode}")
    result = json.loads(out.read_text()) if out else {}
    return run.seconds, result, (load, os.getloadavg()[0])


def silver_path(lake: Path) -> Path:
    return lake / "silver" / "public" / "bench"


def build_silver(lake: Path, n: int, seed: int) -> dict:
    """Bronze of n inserts, applied by one run_silver (the pipeline's own initial load)."""
    bronze, _ = initial_rows(n, seed)
    append_bronze(lake, bronze, INITIAL_COMMIT_ROWS)
    del bronze
    _, result, load = child("--phase", "silver", "--lake", str(lake),
                            out=lake.parent / "build.json")
    return {"method": "run_silver", "seconds": result["seconds"],
            "peak_mb": result["rss_peak_mb"], "load": load, "silver": result}


def build_direct(lake: Path, n: int, seed: int,
                 first_run: Callable[[], None] | None = None,
                 also: Callable[[pa.Table], None] | None = None) -> dict:
    """The same lake without running silver over the n rows: run_silver applies the first
    transaction only (so the pipeline itself creates the silver, tombstone and progress
    tables, in its own schema and protocol), then delta-rs appends the other rows' typed
    values to silver in DIRECT_FILE_ROWS-row files in key order, and the pipeline's own
    write_progress moves public.bench and the "*" row to the initial load's last position,
    exactly what a run_silver of the whole load would have recorded.

    first_run: runs silver over the first transaction instead of the default child;
    also: called with each file's rows after they are appended (to build other tables).
    """
    from deltalake import write_deltalake

    started = time.perf_counter()
    load = os.getloadavg()[0]
    for begin in range(0, n, BUILD_ROWS):  # in parts: 50M rows at once would not fit
        bronze, typed = initial_rows(min(BUILD_ROWS, n - begin), seed, begin)
        first = TXN_ROWS if begin == 0 else 0
        if begin == 0:
            append_bronze(lake, bronze.slice(0, TXN_ROWS), INITIAL_COMMIT_ROWS)
            if first_run is None:
                child("--phase", "silver", "--lake", str(lake), out=lake.parent / "build.json")
            else:
                first_run()
        append_bronze(lake, bronze.slice(first), INITIAL_COMMIT_ROWS)
        del bronze
        rows = pa.table({f.name: typed[f.name] for f in SILVER_SCHEMA}, schema=SILVER_SCHEMA)
        for start in range(first, rows.num_rows, DIRECT_FILE_ROWS):
            part = rows.slice(start, DIRECT_FILE_ROWS)
            write_deltalake(str(silver_path(lake)), part, mode="append")
            if also is not None:
                also(part)
    last = rows.slice(rows.num_rows - 1)
    child("--phase", "progress", "--lake", str(lake), "--position",
          str(last["_lsn"][0].as_py()), str(last["_change_index"][0].as_py()))
    return {"method": "direct", "seconds": time.perf_counter() - started,
            "peak_mb": vm_hwm_mb(), "load": (load, os.getloadavg()[0])}


def build_base(work: Path, n: int, initial: str, seed: int,
               silver: Callable[[Path, int, int], dict] = build_silver,
               direct: Callable[[Path, int, int], dict] = build_direct) -> tuple[Path, dict]:
    """A fresh lake of n rows under `work`: run_silver's own initial load up to 1M rows,
    the direct build above that (or as `initial` says); its path and the build's record."""
    base = work / f"base-{n}"
    shutil.rmtree(base, ignore_errors=True)
    method = initial if initial != "auto" else ("silver" if n <= 1_000_000 else "direct")
    return base, (silver if method == "silver" else direct)(base, n, seed)


def last_commit(path: Path) -> dict:
    """Files the table's newest commit removed (rewritten, or given a deletion vector)
    and added, the MB of the new files it wrote, and the table's file count."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(path))
    log = path / "_delta_log" / f"{dt.version():020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line]
    removed = [a["remove"] for a in actions if "remove" in a]
    added = [a["add"] for a in actions if "add" in a]
    # a file given a deletion vector is removed and added again, under its old path
    kept = {a["path"] for a in removed}
    return {"removed": len(removed), "added": len(added), "files": len(dt.file_uris()),
            "added_mb": sum(a.get("size", 0) for a in added if a["path"] not in kept) / 2**20}


def same_rows(table: Path, other: Path) -> bool:
    """Two engines' results are the same table, row for row (sorted by key)."""
    from pipelines.lake import read_delta

    def rows(path: Path) -> pa.Table:
        return read_delta(path, columns=SILVER_SCHEMA.names).cast(SILVER_SCHEMA).sort_by("id")
    return rows(table).equals(rows(other))


STEPS = {  # request label prefix -> column of the breakdown
    "scan.": "scan", "catalog.staged": "stage", "types.failures_of": "check",
    "stage._check": "check",
    "MERGE INTO silver": "merge", "MERGE INTO tombstones": "tombstones",
}


def breakdown(result: dict) -> dict[str, float]:
    """Seconds of the run per step (requests by label), the rest as "other"."""
    steps = {name: 0.0 for name in STEPS.values()}
    for label, _, seconds in result["requests"]:
        for prefix, name in STEPS.items():
            if label.startswith(prefix):
                steps[name] += seconds
                break
    steps["other"] = result["seconds"] - sum(steps.values())
    return steps


def request_summary(result: dict, top: int = 6) -> list[str]:
    by_label: dict[str, list[float]] = {}
    for label, kind, seconds in result["requests"]:
        by_label.setdefault(f"{label} ({kind})", []).append(seconds)
    ranked = sorted(by_label.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [f"      {sum(s):7.2f} s {len(s):3d}x  {label}" for label, s in ranked]


def step_summary(result: dict) -> str:
    """Seconds of the run per job step (phase silver and spark both record them)."""
    steps: dict[str, float] = {}
    for name, seconds in result["steps"]:
        steps[name] = steps.get(name, 0.0) + seconds
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in steps.items())


def run_case(base: Path, work: Path, n: int, m: int, repeat: int, seed: int,
             verify: bool, toast_share: float, engines: list[str], shape: str,
             warm: bool = False) -> dict:
    """One run of a case: the batch lands in a copy of the base lake, then each engine
    applies it to its own copy of the same N-row silver table, one after the other (so
    the runs of a case alternate between the engines); the first engine's table is the
    one the others must equal."""
    case = work / f"n{n}-m{m}-r{repeat}"
    shutil.rmtree(case, ignore_errors=True)
    lake = case / "lake"
    shutil.copytree(base, lake)
    if "deltars" in engines:  # the identical N-row copies
        shutil.copytree(silver_path(lake), case / "deltars")
    for engine in set(engines) & {"sail", "spark"}:  # for the MERGE alone
        shutil.copytree(silver_path(lake), case / f"{engine}merge")
    bronze, source = batch_rows(n, m, seed + n + m, toast_share, shape)
    append_bronze(lake, bronze, INGEST_COMMIT_ROWS)
    pq.write_table(source, case / "source.parquet")
    keys = source.num_rows
    del bronze, source
    if "spark" in engines:  # the lake Sail's run gets: same bronze, same silver before it
        shutil.copytree(lake, case / "spark")
    merge_source = ("--source", str(case / "source.parquet"))
    warming = ("--warm",) if warm else ()
    argv = {"sail": ("--phase", "silver", "--lake", str(lake), *warming),
            "spark": ("--phase", "spark", "--lake", str(case / "spark"), *warming),
            "deltars": ("--phase", "deltars", "--target", str(case / "deltars"),
                        *merge_source)}
    tables = {"sail": silver_path(lake), "spark": silver_path(case / "spark"),
              "deltars": case / "deltars"}
    result = {"n": n, "m": m, "repeat": repeat, "keys": keys}
    for engine in engines:
        _, measured, load = child(*argv[engine], out=case / f"{engine}.json")
        result[engine] = {**measured, "load": load, "commit": last_commit(tables[engine])}
    for engine in [e for e in engines if e in ("sail", "spark")]:
        _, result[f"{engine}_merge"], _ = child(
            "--phase", "merge", "--engine", engine, "--target", str(case / f"{engine}merge"),
            *merge_source, *warming, out=case / f"{engine}merge.json")
    first, *others = engines
    result["equal"] = ({e: same_rows(tables[first], tables[e]) for e in others}
                       if verify else None)
    shutil.rmtree(case, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table-rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--changes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="runs of every case (default 2)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES),
                        help="what applies each batch: silver on Sail, silver on classic "
                             "Spark with Delta Lake, a delta-rs MERGE (default: all three)")
    parser.add_argument("--initial", choices=("auto", "silver", "direct"), default="auto",
                        help="build the N-row silver table with run_silver, or directly "
                             "(auto: run_silver up to 1M rows, direct above: see the docs)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the row-for-row comparison of the engines' tables")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--toast-share", type=float, default=0.0,
                        help="share of the updates that leave the name column unchanged "
                             "(unchanged TOAST: silver then runs its TOAST fill; default 0)")
    parser.add_argument("--shape", choices=("recent", "uniform"), default="recent",
                        help="which keys a batch changes: recent (inserts, and updates and "
                             "deletes of the newest 1%% of ids) or uniform (random keys); "
                             "default recent")
    parser.add_argument("--warm", action="store_true",
                        help="before the measured run, Sail's and Spark's processes apply a "
                             "small batch to a scratch lake: a warm driver, as in a "
                             "long-running `lakehouse run` (default: a fresh process's "
                             "first run, as a one-shot job has)")
    parser.add_argument("--phase", choices=("silver", "spark", "deltars", "merge",
                                            "progress"), help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=("sail", "spark"), help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--position", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "silver":
        return phase_silver(args.lake, args.out, args.warm)
    if args.phase == "spark":
        return phase_spark(args.lake, args.out, args.warm)
    if args.phase == "deltars":
        return phase_deltars(args.target, args.source, args.out)
    if args.phase == "merge":
        return phase_merge(args.engine, args.target, args.source, args.out, args.warm)
    if args.phase == "progress":
        return phase_progress(args.lake, *args.position)

    engines = [e for e in ENGINES if e in args.engines]
    with work_and_results(args.work, "silver-bench-", args.json) as (work, builds, results):
        bases = {}
        for n in args.table_rows:
            bases[n], build = build_base(work, n, args.initial, args.seed)
            build.update(n=n, files=last_commit(silver_path(bases[n]))["files"])
            builds.append(build)
            print(f"built N={n:,} ({build['method']}): {build['seconds']:.1f} s, peak "
                  f"{build['peak_mb']:.0f} MB, load {build['load'][0]:.1f}-"
                  f"{build['load'][1]:.1f}, {build['files']} silver files", flush=True)
        # the table sizes alternate run by run: whatever a run leaves behind on a shared
        # machine (page cache, memory) then weighs on every size alike
        for r in range(args.repeat):
            for n in args.table_rows:
                for m in args.changes:
                    result = run_case(bases[n], work, n, m, r, args.seed, not args.no_verify,
                                      args.toast_share, engines, args.shape, args.warm)
                    results.append(result)
                    _print_run(result, engines)
        for base in bases.values():
            shutil.rmtree(base, ignore_errors=True)
    report(builds, results, engines)


def _print_run(result: dict, engines: list[str]) -> None:
    timings = [f"{LABELS[e]} {result[e]['seconds']:.2f} s" + (
        f" (start-up {result[e]['startup']:.1f} s)" if e == "spark" else "")
        for e in engines]
    timings += [f"{LABELS[e]} MERGE alone {result[e + '_merge']['seconds']:.2f} s"
                for e in engines if e + "_merge" in result]
    print(f"  N={result['n']:,} M={result['m']:,} run {result['repeat'] + 1}: "
          f"{', '.join(timings)}, equal={result['equal']}", flush=True)
    if "sail" in engines:
        print("\n".join(request_summary(result["sail"])), flush=True)
    if "spark" in engines:
        print(f"      Spark steps: {step_summary(result['spark'])}; "
              f"{result['spark']['spark_jobs']} Spark jobs", flush=True)


def median(runs: list[dict], engine: str, key: str = "seconds") -> float:
    return statistics.median(r[engine][key] for r in runs)


def report(builds: list[dict], results: list[dict], engines: list[str]) -> None:
    rows = [["table rows", "initial build", "seconds", "peak MB", "load 1m", "silver files"]]
    for b in builds:
        rows.append([f"{b['n']:,}", b["method"], f"{b['seconds']:.1f}", f"{b['peak_mb']:.0f}",
                     f"{b['load'][0]:.1f}-{b['load'][1]:.1f}", str(b["files"])])
    print("\n" + table(rows))

    sail, spark, deltars = ("sail" in engines, "spark" in engines, "deltars" in engines)
    rows = [["table rows", "changes", "run", "keys", *(f"{LABELS[e]} s" for e in engines),
             *(["Sail MERGE alone s", "Sail stage s", "Sail merge s", "Sail other s"]
               if sail else []),
             f"files touched, MB written {' | '.join(LABELS[e] for e in engines)}", "load 1m",
             "equal"]]
    for r in results:
        row = [f"{r['n']:,}", f"{r['m']:,}", str(r["repeat"] + 1), f"{r['keys']:,}",
               *(f"{r[e]['seconds']:.2f}" for e in engines)]
        if sail:
            steps, merge_alone = breakdown(r["sail"]), r["sail_merge"]["seconds"]
            row += [f"{merge_alone:.2f}" + (f" ({merge_alone / r['deltars']['seconds']:.1f}x)"
                                            if deltars else ""),
                    f"{steps['stage']:.2f}", f"{steps['merge']:.2f}",
                    f"{r['sail']['seconds'] - steps['stage'] - steps['merge']:.2f}"]
        commits = [r[e]["commit"] for e in engines]
        loads = [load for e in engines for load in r[e]["load"]]
        row += [" | ".join(f"{c['removed']} of {c['files'] - c['added'] + c['removed']}, "
                           f"{c['added_mb']:.1f}" for c in commits),
                f"{min(loads):.1f}-{max(loads):.1f}", str(r["equal"])]
        rows.append(row)
    print("\n" + table(rows))

    cases: dict[tuple[int, int], list[dict]] = {}
    for r in results:
        cases.setdefault((r["n"], r["m"]), []).append(r)
    rows = [["table rows", "changes", "runs",
             *(["Sail s", "Sail changes/s", "Sail peak MB"] if sail else []),
             *(["Spark s", "Spark changes/s", "Spark peak MB Python + JVM", "Spark start-up s",
                "Spark jobs", "Spark MERGE alone s"] if spark else []),
             *(["delta-rs s", "delta-rs peak MB"] if deltars else []),
             *(["Spark / Sail"] if sail and spark else []),
             *(["Sail / delta-rs"] if sail and deltars else []), "equal"]]
    for (n, m), runs in cases.items():
        row = [f"{n:,}", f"{m:,}", str(len(runs))]
        if sail:
            row += [f"{median(runs, 'sail'):.2f}", f"{m / median(runs, 'sail'):,.0f}",
                    f"{median(runs, 'sail', 'rss_peak_mb'):,.0f}"]
        if spark:
            row += [f"{median(runs, 'spark'):.2f}", f"{m / median(runs, 'spark'):,.0f}",
                    f"{median(runs, 'spark', 'rss_peak_mb'):,.0f} + "
                    f"{median(runs, 'spark', 'jvm_rss_peak_mb'):,.0f}",
                    f"{median(runs, 'spark', 'startup'):.1f}",
                    f"{median(runs, 'spark', 'spark_jobs'):.0f}",
                    f"{median(runs, 'spark_merge'):.2f}"]
        if deltars:
            row += [f"{median(runs, 'deltars'):.2f}",
                    f"{median(runs, 'deltars', 'rss_peak_mb'):,.0f}"]
        if sail and spark:
            row.append(f"{median(runs, 'spark') / median(runs, 'sail'):.1f}x")
        if sail and deltars:
            row.append(f"{median(runs, 'sail') / median(runs, 'deltars'):.1f}x")
        equal = [same for r in runs if r["equal"] is not None for same in r["equal"].values()]
        row.append(str(all(equal)) if equal else "-")
        rows.append(row)
    print("\n" + table(rows))
    print("\nPer run: stage: bronze -> events -> TOAST fill -> latest per key -> typed, stale "
          "events marked, written to the staging Parquet (catalog.staged); merge: the MERGE "
          "INTO the silver table; other: scan, type check, tombstone append, progress, "
          "catalog. Sail MERGE alone: the same MERGE statement of delta-rs's source rows "
          "(x: its ratio to delta-rs); Spark MERGE alone: the same on classic Spark. "
          "equal: each engine's table against the first's. "
          "Per case: medians of its runs; changes/s: bronze changes per second of the "
          "median run. Spark: classic Spark with Delta Lake, master " + SPARK_MASTER + "; "
          "its start-up (JVM, Delta jars) is not in its seconds; peak MB is the Python "
          "process's plus the JVM's. Sail runs in the Python process: its peak MB is both.")


if __name__ == "__main__":
    main()
