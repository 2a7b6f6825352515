"""Freshness of `lakehouse run` (ingest + silver loop) under a constant-rate change
workload, as the silver table grows: seconds from a source commit to silver.

For each table size N (--table-rows) an embedded Postgres (wal_level=logical, the
embedded server's default) gets public.bench, as narrow as silver_bench's table (id int8
key, name text, amount numeric(12,2), qty int4, active bool, updated_at timestamptz),
filled with N rows by one INSERT ... SELECT FROM generate_series, then VACUUM ANALYZE and
CHECKPOINT ("source s"). Then silver gets the same N rows (--initial; every step timed):

- pipeline: `lakehouse setup`, `lakehouse backfill`, `lakehouse ingest --until-lsn` (the
  backfill's watermarks reach bronze) and the first `lakehouse silver`, each a child
  process: the honest path.
- direct (the default): `lakehouse setup`; an UPDATE of row 1 that changes nothing goes
  through the slot and the first `lakehouse silver` creates the silver, tombstone and
  progress tables from it (the pipeline's own schema, protocol and progress). psql's
  \\copy exports the other N-1 rows as CSV; pyarrow types them as that silver table
  does and delta-rs appends them in one commit, in key order, in 64 MB files (a bulk
  load's: larger than the files silver's compaction packs), at the position where the
  slot starts: older than any change the slot streams, so the pipeline continues from
  them as from a backfill. `lakehouse verify` after every case checks the result.
  Direct is the default. On 2 shared cores (load 3-6) it took 4.2-6.0 s for 1M rows
  and 13-26 s for 10M (the export and append, linear in N: about a minute for 50M),
  against the pipeline path's backfill and first silver run (about 35 s for 10M rows:
  bench.silver_first_run).

Then the database and the lake are copied aside (server stopped: a cold copy is
consistent) and put back before every later case, so every case starts from the same N
rows. A case is a table size, a workload shape, a rate and an engine:

- `lakehouse run` starts as a child process (engine `local` for sail; `spark` with
  master local[2] for spark; nothing else is set: the silver loop runs on its defaults),
  its output (INFO) in a log file. The workload starts once it has started its ingest
  (its engine is up then). Spark's first silver pass warms the JVM up and takes much
  longer than the next: raise --warmup to leave it out.
- The workload: --connections threads, each with its own psycopg connection, commit
  transactions of --txn-size changes on one schedule of --rate changes/s in all (each
  sleeps until its next transaction is due; one that is late does not sleep until it
  caught up). A transaction's changes are inserts (40%), updates (50%) and deletes (10%),
  drawn per transaction; inserts take new ids above the maximum. --shape recent: the
  updates and deletes hit live ids among the newest 1% (how time entries, orders and
  tickets change); uniform: live ids anywhere in the table. A transaction is one round
  trip (its statements in one simple query). Connection w owns the ids = w (mod
  connections), so transactions never wait for each other's row locks; "the newest 1%"
  is each connection's own newest 1%. Achieved rate = changes committed / time from the
  start to the last commit.
- Probes: every --probe-interval seconds another connection inserts a row with a
  negative id (the workload never touches those) and records the wall time after its
  COMMIT returned. A poller stats the silver table's next _delta_log version every 50
  ms; for every new version it reads the negative ids in silver with delta-rs's own scan
  (which applies deletion vectors; no Spark in this process). Freshness of a probe = the
  time the poller saw the first version that holds it - its commit time; p50, p95 and
  max over the probes committed after the first --warmup seconds of the workload. After
  the workload `lakehouse run` goes on until every probe is in silver (at most 120 s).
- Silver runs: the `silver applied ... in X s` lines `lakehouse run` logs (a run with
  nothing new logs nothing), from the end of the warm-up until it is stopped: count, p50,
  p95. MERGEs: the silver table's Delta history (delta-rs) over the same time: count, and
  per MERGE the medians of operationMetrics numTargetBytesAdded, numTargetRowsCopied,
  numTargetFilesRemoved, numTargetDeletionVectorsAdded ("-" where the engine records none).
- Peak RSS: VmHWM of the `lakehouse run` process (Python, and the Sail server in it), of
  its ingest child and, on spark, of its JVM child, read every second from /proc. Not
  wait4's ru_maxrss (in the JSON): it is the largest of the child, the descendants it
  waited for and, through vfork, this process.
- Load: the 1-minute load average, every second from the start until after verify.
- Then SIGTERM: `lakehouse run` stops its ingest, applies what landed and exits 0, and
  `lakehouse verify` must exit 0 (silver equal to the source), or the benchmark stops
  (keeping its scratch directory, with each case's logs).

Output: a markdown table of the initial builds, one row per case as it ends, a markdown
table of every case, and with --json every measurement (each probe, silver run and
MERGE). A case takes --seconds plus 1-3 minutes (start, drain, verify, copying the state
back); the machine may be shared, so the load comes with every case.

    python -m bench.freshness_bench [--table-rows 1000000 10000000] [--rate 2000 10000]
                                    [--shape recent uniform] [--engines sail spark]
                                    [--seconds 180] [--initial direct|pipeline]
                                    [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

from bench.common import Run, current_lsn, embedded_server, lakehouse, write_config
from bench.silver_bench import silver_path, vm_hwm_mb
from pipelines.embedded_pg import EmbeddedPostgres, bin_dir
from pipelines.positions import parse_lsn

SHAPES = ("recent", "uniform")
ENGINES = {"sail": {"engine": "local"},
           "spark": {"engine": "spark", "spark": {"master": "local[2]"}}}
MIX = (0.4, 0.5, 0.1)  # inserts, updates, deletes
RECENT_SHARE = 0.01  # --shape recent: updates and deletes among the newest 1% of ids
BULK_FILE_MB = 64  # the initial files: like a backfill's, left alone by compaction
SOURCE_TYPES = {"id": pa.int64(), "name": pa.string(), "amount": pa.decimal128(12, 2),
                "qty": pa.int32(), "active": pa.bool_(), "updated_at": pa.int64()}
UTC = pa.timestamp("us", tz="UTC")
COPY_ROWS = ("SELECT id, name, amount, qty, active, "
             "(extract(epoch FROM updated_at) * 1000000)::int8 FROM bench "
             "WHERE id <> 1 ORDER BY id")
CSV_READ = pacsv.ReadOptions(column_names=list(SOURCE_TYPES))
CSV_TYPES = pacsv.ConvertOptions(column_types=SOURCE_TYPES, true_values=["t"],
                                 false_values=["f"])
CREATE = ("CREATE TABLE bench (id int8 PRIMARY KEY, name text, amount numeric(12,2), "
          "qty int4, active bool, updated_at timestamptz)")
FILL = ("INSERT INTO bench SELECT g, 'user-' || g, (g %% 1000000) / 100.0, g %% 10000, "
        "g %% 5 <> 0, timestamptz '2026-01-05 08:00+00' + g * interval '1 millisecond' "
        "FROM generate_series(1, %s) g")
SILVER_RUN = re.compile(rb"silver applied \d+ table\(s\) in ([0-9.]+) s \((\d+) bronze changes\)")
STOPPED = b"ingest stopped (exit"  # what `lakehouse run` logs on SIGTERM
MERGE_METRICS = ("numTargetBytesAdded", "numTargetRowsCopied", "numTargetFilesRemoved",
                 "numTargetDeletionVectorsAdded")
DRAIN_SECONDS = 120.0  # after the workload: how long to wait for the last probes


@dataclass(frozen=True)
class Case:
    rows: int
    shape: str
    rate: float  # changes per second, asked
    engine: str

    @property
    def name(self) -> str:
        return f"n{self.rows}-{self.shape}-{self.rate:g}-{self.engine}"


@dataclass(frozen=True)
class Load:
    """The change workload of a case."""

    shape: str
    rate: float
    txn_size: int
    connections: int
    seconds: float
    probe_interval: float


# --- source and initial state ------------------------------------------------------------

def create_source(dsn: str, rows: int) -> float:
    """public.bench with ids 1..rows, vacuumed (readers find hint bits set) and
    checkpointed (the load's dirty pages are not written during the cases); seconds."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CREATE)
        conn.execute(FILL, (rows,))
        conn.execute("VACUUM ANALYZE bench")
        conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def build_pipeline(config: Path, dsn: str) -> dict[str, Run]:
    """setup, backfill, ingest of its watermarks, first silver run: timed children."""
    quiet = {"stdout": subprocess.DEVNULL}
    steps = {"setup": lakehouse(config, "setup", **quiet),
             "backfill": lakehouse(config, "backfill", **quiet)}
    steps["ingest"] = lakehouse(config, "ingest", "--until-lsn", current_lsn(dsn))
    steps["silver"] = lakehouse(config, "silver", **quiet)
    return steps


def build_direct(config: Path, dsn: str, lake: Path, scratch: Path) -> dict[str, Run]:
    """setup; silver created by the pipeline from one row; the rest appended by delta-rs."""
    quiet = {"stdout": subprocess.DEVNULL}
    steps = {"setup": lakehouse(config, "setup", **quiet)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        slot_start = parse_lsn(conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_name = 'lakehouse'").fetchone()[0])
        conn.execute("UPDATE bench SET name = name WHERE id = 1")
    steps["ingest"] = lakehouse(config, "ingest", "--until-lsn", current_lsn(dsn))
    steps["silver"] = lakehouse(config, "silver", **quiet)
    started = time.perf_counter()
    append_rows(dsn, silver_path(lake), slot_start, scratch)
    steps["append"] = Run(time.perf_counter() - started, vm_hwm_mb(), 0)
    return steps


def append_rows(dsn: str, silver: Path, slot_start: int, scratch: Path) -> None:
    """Every source row but id 1, typed as the silver table types them, appended in one
    delta-rs commit at position (slot start, 0): rows committed before the slot existed,
    older than anything the slot streams. psql's \\copy writes them to a CSV file (a
    COPY through psycopg costs a Python call per row), read back 64 MB at a time (not
    pyarrow's streaming CSV reader: it kept the whole input in memory)."""
    from deltalake import DeltaTable, write_deltalake

    subprocess.run([str(bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                    "-c", f"\\copy ({COPY_ROWS}) TO '{scratch}' WITH (FORMAT csv)"], check=True)
    with psycopg.connect(dsn) as conn:
        loaded_at = conn.execute("SELECT now()").fetchone()[0]
    position = {"_lsn": pa.scalar(slot_start, pa.int64()),
                "_change_index": pa.scalar(0, pa.int64()), "_commit_ts": pa.scalar(loaded_at, UTC)}
    schema = pa.schema(DeltaTable(str(silver)).schema())

    def typed() -> Iterator[pa.RecordBatch]:
        with scratch.open("rb") as csv:
            while chunk := csv.read(64 << 20) + csv.readline():
                rows = pacsv.read_csv(pa.py_buffer(chunk), read_options=CSV_READ,
                                      convert_options=CSV_TYPES)
                columns = {name: rows.column(name) for name in SOURCE_TYPES}
                columns["updated_at"] = columns["updated_at"].cast(UTC)
                columns.update({name: pa.repeat(value, rows.num_rows)
                                for name, value in position.items()})
                yield from pa.table(columns).select(schema.names).cast(schema).to_batches()
    write_deltalake(str(silver), pa.RecordBatchReader.from_batches(schema, typed()),
                    mode="append", target_file_size=BULK_FILE_MB << 20)
    scratch.unlink()


def copy_state(server: EmbeddedPostgres, pairs: list[tuple[Path, Path]]) -> float:
    """Copy each (from, to) with the server stopped; seconds. cp -a, not shutil: it
    keeps the owner (under root the server runs as another user)."""
    started = time.perf_counter()
    server.stop()
    for source, target in pairs:
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    server.start()
    return time.perf_counter() - started


# --- the workload --------------------------------------------------------------------------

class Keys:
    """Which ids exist. Connection w owns the ids = w (mod owners): it inserts them and is
    the only one to update or delete them, so the array needs no lock."""

    def __init__(self, rows: int, capacity: int, owners: int) -> None:
        self.alive = np.zeros(capacity + 1, dtype=bool)
        self.alive[1:rows + 1] = True
        self.owners = owners
        self.next = [rows + 1 + (w - rows - 1) % owners for w in range(owners)]

    def insert(self, owner: int, n: int) -> np.ndarray:
        ids = self.next[owner] + self.owners * np.arange(n, dtype=np.int64)
        self.next[owner] += self.owners * n
        self.alive[ids] = True
        return ids

    def pick(self, owner: int, n: int, share: float, rng: np.random.Generator) -> np.ndarray:
        """n distinct live ids of `owner`, at random among its newest `share` of ids (each
        owner's own newest: the owners' inserts drift apart, so a window over all ids
        could hold none of a lagging owner's). A window with too few live ids widens."""
        top = self.next[owner] - self.owners
        count = top // self.owners + 1
        newest = max(1, int(count * share))
        found = np.empty(0, dtype=np.int64)
        while len(found) < n:
            ids = top - self.owners * rng.integers(0, newest, 4 * n)
            found = np.concatenate([found, ids[self.alive[ids]]])
            found = found[np.sort(np.unique(found, return_index=True)[1])]
            newest = min(count, 2 * newest)
        return found[:n]


def transaction_sql(inserts: np.ndarray, updates: np.ndarray, deletes: np.ndarray,
                    rng: np.random.Generator, tag: int) -> str:
    """The statements of one transaction as one simple query (one round trip, one
    implicit transaction). Every value is a number generated here, so they are inline."""
    def values(ids: np.ndarray, name: str, extra: str) -> str:
        cents = rng.integers(0, 1_000_000_000, len(ids))
        qty = rng.integers(0, 10_000, len(ids))
        active = rng.random(len(ids)) < 0.8
        return ",".join(f"({i},'user-{i}{name}',{c // 100}.{c % 100:02d},{q},{a}{extra})"
                        for i, c, q, a in zip(ids, cents, qty, active))
    statements = []
    if len(inserts):
        statements.append(f"INSERT INTO bench VALUES {values(inserts, '', ',now()')}")
    if len(updates):
        statements.append(
            "UPDATE bench b SET name = v.name, amount = v.amount, qty = v.qty, "
            "active = v.active, updated_at = now() "
            f"FROM (VALUES {values(updates, f'-u{tag}', '')}) "
            "v(id, name, amount, qty, active) WHERE b.id = v.id")
    if len(deletes):
        statements.append(f"DELETE FROM bench WHERE id IN ({','.join(map(str, deletes))})")
    return ";".join(statements)


@dataclass
class Driven:
    """What one connection did."""

    changes: int = 0
    transactions: int = 0
    last_commit: float = 0.0
    most_behind: float = 0.0  # seconds a transaction started after it was due, at most


def drive(dsn: str, keys: Keys, owner: int, load: Load, start: float, seed: int) -> Driven:
    """Connection `owner`'s share of the schedule: transaction k of all is due at
    start + k / (rate / txn_size), and this one runs k = owner, owner + connections, ..."""
    rng = np.random.default_rng(seed + owner)
    per_second = load.rate / load.txn_size
    done = Driven()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for k in range(owner, int(load.seconds * per_second), load.connections):
            due = start + k / per_second
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            done.most_behind = max(done.most_behind, -delay)
            inserts, updates, deletes = rng.multinomial(load.txn_size, MIX)
            touched = keys.pick(owner, updates + deletes,
                                RECENT_SHARE if load.shape == "recent" else 1.0, rng)
            keys.alive[touched[updates:]] = False
            conn.execute(transaction_sql(keys.insert(owner, inserts), touched[:updates],
                                         touched[updates:], rng, k))
            done.changes += load.txn_size
            done.transactions += 1
            done.last_commit = time.time()
    return done


def probe(dsn: str, start: float, load: Load) -> list[tuple[int, float]]:
    """Insert row -k at start + k * probe_interval: (id, wall time after COMMIT) each."""
    committed = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for k in range(1, int(load.seconds / load.probe_interval) + 1):
            time.sleep(max(0.0, start + k * load.probe_interval - time.time()))
            conn.execute(f"INSERT INTO bench VALUES ({-k}, 'probe', 0, 0, true, now())")
            committed.append((-k, time.time()))
    return committed


class SilverWatch(threading.Thread):
    """When each negative id first shows in the silver table: the time the poller
    noticed the table version that holds it."""

    def __init__(self, table: Path) -> None:
        super().__init__(daemon=True)
        from deltalake import DeltaTable

        self.table, self.seen, self.stopped = table, {}, threading.Event()
        self.version = DeltaTable(str(table)).version()

    def run(self) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        while not self.stopped.wait(0.05):
            if not (self.table / "_delta_log" / f"{self.version + 1:020d}.json").exists():
                continue
            noticed = time.time()
            try:
                dt = DeltaTable(str(self.table))
                ids = dt.scan(columns=["id"], predicate="id < 0").read_all().column("id")
            except (DeltaError, OSError):  # a log file the pipeline trimmed meanwhile
                continue
            self.version = dt.version()
            for i in ids.to_pylist():
                self.seen.setdefault(i, noticed)


# --- the `lakehouse run` child ---------------------------------------------------------------

def children(pid: int) -> list[int]:
    """The process's children (of all its threads); [] once it ended."""
    found = []
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(p) for p in tasks.read_text().split()]
        except OSError:
            pass
    return found


def role(pid: int) -> str | None:
    """A child of `lakehouse run`: "ingest" or "jvm" (None: gone, or something else)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return "jvm" if comm == "java" else "ingest" if b"ingest" in argv else None


@dataclass
class Sampler:
    """Every second: VmHWM of `lakehouse run` and its children, and the 1-minute load."""

    pid: int
    peaks: dict[str, float] = field(default_factory=dict)
    loads: list[float] = field(default_factory=lambda: [os.getloadavg()[0]])
    stopped: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.loads.append(os.getloadavg()[0])
        for name, pid in [("run", self.pid), *((role(c), c) for c in children(self.pid))]:
            try:
                if name is not None:
                    self.peaks[name] = max(self.peaks.get(name, 0.0), vm_hwm_mb(pid))
            except OSError:  # ended since the listing
                pass

    def loop(self) -> None:
        while not self.stopped.wait(1.0):
            self.sample()


def wait_ready(process: subprocess.Popen, timeout: float = 600) -> None:
    """Until `lakehouse run` started its ingest (its engine is up by then)."""
    deadline = time.monotonic() + timeout
    while not any(role(c) == "ingest" for c in children(process.pid)):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"lakehouse run did not start (exit {process.poll()})")
        time.sleep(0.2)


def stop_run(process: subprocess.Popen, timeout: float = 600) -> tuple[int, float]:
    """SIGTERM, then wait4: exit code and ru_maxrss in MB (killed after `timeout`)."""
    process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage.ru_maxrss / 1024
        if time.monotonic() > deadline:
            process.kill()
        time.sleep(0.2)


# --- a case ---------------------------------------------------------------------------------

def silver_runs(log: Path, start: int) -> list[tuple[float, int]]:
    """Seconds and bronze changes of the silver runs `lakehouse run` logged from offset
    `start` of its log until SIGTERM (the final pass comes after "ingest stopped"). Read
    after it exited: a run's line comes after its MERGE, which the probes may have waited
    for."""
    with log.open("rb") as text:
        text.seek(start)
        before_stop = text.read().split(STOPPED, 1)[0]
    return [(float(s), int(n)) for s, n in SILVER_RUN.findall(before_stop)]


def merges(table: Path, since: float, until: float) -> list[dict]:
    """operationMetrics of the MERGE commits between two wall times (history: delta-rs)."""
    from deltalake import DeltaTable

    return [commit.get("operationMetrics") or {} for commit in DeltaTable(str(table)).history()
            if commit.get("operation") == "MERGE"
            and since * 1000 <= commit.get("timestamp", 0) <= until * 1000]


def run_case(case: Case, load: Load, work: Path, dsn: str, lake: Path, warmup: float,
             seed: int) -> dict:
    """`lakehouse run` under the workload and the probes; then stop, verify, measure."""
    config = write_config(work / f"{case.name}.yml", dsn, lake, **ENGINES[case.engine])
    log = work / f"{case.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--config",
                                    str(config), "run"], stdout=out, stderr=subprocess.STDOUT)
    sampler = Sampler(process.pid)
    threading.Thread(target=sampler.loop, daemon=True).start()
    try:
        wait_ready(process)
        watch = SilverWatch(silver_path(lake))
        watch.start()
        keys = Keys(case.rows, case.rows + int(load.seconds * load.rate)
                    + 2 * load.txn_size * load.connections, load.connections)
        start = time.time() + 0.5
        with ThreadPoolExecutor(load.connections + 1) as pool:
            drivers = [pool.submit(drive, dsn, keys, owner, load, start, seed)
                       for owner in range(load.connections)]
            probes = pool.submit(probe, dsn, start, load)
            time.sleep(max(0.0, start + warmup - time.time()))
            measured_from = log.stat().st_size
            driven = [d.result() for d in drivers]
            committed = probes.result()
        deadline = time.monotonic() + DRAIN_SECONDS
        while len(watch.seen) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.2)
        watch.stopped.set()
        stopping = time.time()
        code, wait4_mb = stop_run(process)
    finally:
        if process.poll() is None:  # the benchmark failed: stop the pipeline too
            stop_run(process, timeout=60)
    if code != 0:
        raise SystemExit(f"lakehouse run exited {code}: see {log}")
    with (work / f"{case.name}.verify").open("w") as out:
        verify = lakehouse(config, "verify", stdout=out)  # exits the benchmark unless equal
    sampler.stopped.set()
    sampler.sample()
    last = max(d.last_commit for d in driven)
    window = [(i, at) for i, at in committed if at >= start + warmup]
    return {**asdict(case), "load": asdict(load),
            "achieved_rate": sum(d.changes for d in driven) / (last - start),
            "most_behind_s": max(d.most_behind for d in driven),
            "transactions": sum(d.transactions for d in driven),
            "freshness": [watch.seen[i] - at for i, at in window if i in watch.seen],
            "probes": len(window), "probes_unseen": sum(i not in watch.seen for i, _ in window),
            "silver_runs": silver_runs(log, measured_from),
            "merges": merges(silver_path(lake), start + warmup, stopping),
            "peak_mb": sampler.peaks, "wait4_maxrss_mb": wait4_mb,
            "load_1m": [min(sampler.loads), max(sampler.loads)],
            "verify": "equal", "verify_s": verify.seconds}


# --- report ---------------------------------------------------------------------------------

def markdown(rows: list[list[str]]) -> str:
    head, *body = rows
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, ["---"] * len(head), *body])


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p95 = np.percentile(values, [50, 95])
    return f"{p50:.1f} / {p95:.1f} / {max(values):.1f}"


def median_metric(merge_metrics: list[dict], key: str) -> float | None:
    values = [float(m[key]) for m in merge_metrics if m.get(key) is not None]
    return float(np.median(values)) if values else None


CASE_HEAD = ["table rows", "shape", "rate asked / achieved", "engine",
             "freshness p50 / p95 / max s", "probes (unseen)", "silver runs",
             "silver run p50 / p95 s", "changes per run p50", "MERGEs",
             "per MERGE (median): MB added / rows copied / files removed / DVs added",
             "peak MB run / ingest / JVM", "load 1m", "verify"]


def case_row(r: dict) -> list[str]:
    runs, peaks = r["silver_runs"], r["peak_mb"]
    added, *counts = (median_metric(r["merges"], key) for key in MERGE_METRICS)
    return [f"{r['rows']:,}", r["shape"], f"{r['rate']:,.0f} / {r['achieved_rate']:,.0f}",
            r["engine"], quantiles(r["freshness"]),
            f"{r['probes']} ({r['probes_unseen']})", str(len(runs)),
            " / ".join(f"{q:.2f}" for q in np.percentile([s for s, _ in runs], [50, 95]))
            if runs else "-",
            f"{np.median([n for _, n in runs]):,.0f}" if runs else "-",
            str(len(r["merges"])),
            " / ".join(["-" if added is None else f"{added / 2**20:.2f}",
                        *("-" if v is None else f"{v:,.0f}" for v in counts)]),
            " / ".join(f"{peaks[k]:,.0f}" if k in peaks else "-"
                       for k in ("run", "ingest", "jvm")),
            "{:.1f}-{:.1f}".format(*r["load_1m"]), r["verify"]]


BUILD_HEAD = ["table rows", "initial", "source s", "steps", "total s", "peak MB",
              "snapshot s"]


def build_row(b: dict) -> list[str]:
    steps = ", ".join(f"{name} {s['seconds']:.1f} s" for name, s in b["steps"].items())
    peak = max(s["peak_rss_mb"] for s in b["steps"].values())
    return [f"{b['rows']:,}", b["method"], f"{b['source_s']:.1f}", steps,
            f"{sum(s['seconds'] for s in b['steps'].values()):.1f}", f"{peak:,.0f}",
            f"{b['snapshot_s']:.1f}"]


# --- main -----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table-rows", type=int, nargs="+", default=[1_000_000, 10_000_000],
                        help="rows of the source and silver table before each case")
    parser.add_argument("--rate", type=float, nargs="+", default=[2000, 10000],
                        help="changes per second the workload asks for")
    parser.add_argument("--shape", nargs="+", choices=SHAPES, default=list(SHAPES),
                        help="recent: updates and deletes among the newest 1%% of ids; "
                             "uniform: anywhere (both also insert new ids)")
    parser.add_argument("--engines", nargs="+", choices=list(ENGINES), default=["sail"],
                        help="engine of `lakehouse run`: sail (engine local) or spark "
                             "(classic Spark with Delta Lake, local[2]) (default: sail)")
    parser.add_argument("--seconds", type=float, default=180,
                        help="seconds of workload per case (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=20,
                        help="first seconds of workload left out of the measurements "
                             "(default: %(default)s)")
    parser.add_argument("--txn-size", type=int, default=10,
                        help="changes per transaction (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=4,
                        help="workload connections (threads) sharing the schedule; one "
                             "may not reach 10,000 changes/s on 2 cores (default: %(default)s)")
    parser.add_argument("--probe-interval", type=float, default=0.5,
                        help="seconds between freshness probes (default: %(default)s)")
    parser.add_argument("--initial", choices=("direct", "pipeline"), default="direct",
                        help="how silver gets the N rows first: see above (default: direct)")
    parser.add_argument("--build-only", action="store_true",
                        help="time the source and the initial state only, then stop")
    parser.add_argument("--work", type=Path,
                        help="keep each size's scratch directory (lake, logs) under this "
                             "one (default: a temporary one, removed unless a case failed)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    return parser.parse_args()


def run_size(args: argparse.Namespace, rows: int, work: Path, builds: list[dict],
             results: list[dict]) -> None:
    """One table size: source, initial state, snapshot, then every case from it."""
    with embedded_server() as server:
        dsn, lake = server.dsn(), work / "lake"
        build = {"rows": rows, "method": args.initial, "source_s": create_source(dsn, rows)}
        config = write_config(work / "build.yml", dsn, lake)
        steps = (build_direct(config, dsn, lake, work / "rows.csv")
                 if args.initial == "direct" else build_pipeline(config, dsn))
        build["steps"] = {name: asdict(run) for name, run in steps.items()}
        saved = [(server.data_dir, work / "saved-pg"), (lake, work / "saved-lake")]
        build["snapshot_s"] = 0.0 if args.build_only else copy_state(server, saved)
        builds.append(build)
        print(markdown([BUILD_HEAD, build_row(build)]), flush=True)
        cases = [Case(rows, shape, rate, engine) for shape in args.shape
                 for rate in args.rate for engine in args.engines]
        for number, case in enumerate([] if args.build_only else cases):
            if number:
                copy_state(server, [(copy, live) for live, copy in saved])
            load = Load(case.shape, case.rate, args.txn_size, args.connections, args.seconds,
                        args.probe_interval)
            results.append(run_case(case, load, work, dsn, lake, args.warmup, args.seed))
            print(markdown([CASE_HEAD, case_row(results[-1])]), flush=True)


def main() -> None:
    args = parse_args()
    os.environ.setdefault("RUST_LOG", "warn")  # Sail's INFO lines, in every child
    builds: list[dict] = []
    results: list[dict] = []
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    try:
        for rows in args.table_rows:
            work = Path(tempfile.mkdtemp(prefix=f"freshness-{rows}-", dir=args.work))
            run_size(args, rows, work, builds, results)
            if args.work is None:  # kept after a failure: the logs are there
                shutil.rmtree(work)
    finally:
        if args.json:
            args.json.write_text(json.dumps({"builds": builds, "cases": results}, indent=1,
                                            default=str))
    print("\n" + markdown([BUILD_HEAD, *map(build_row, builds)]))
    if results:
        print("\n" + markdown([CASE_HEAD, *map(case_row, results)]))


if __name__ == "__main__":
    main()
