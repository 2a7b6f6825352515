"""Silver's incremental run with history on and off: what the history table adds to a
run, and how fast the history table grows.

For each table size N (--rows) a lake is built once with history on: bronze of N inserts
of silver_bench's narrow table (public.bench), and silver, tombstone and history tables
holding those N rows (--initial: by one run_silver with history on, or "direct": the
pipeline creates the tables from the first transaction, delta-rs appends the other
rows to silver and their open versions to the history table, and the pipeline's
write_progress records the load's last position; auto: run_silver up to 1M rows). For
each batch size M (--changes) a copy of that lake gets silver_bench's batch of M changes
in bronze (--shape recent, the default: 40% inserts, 50% updates and 10% deletes of the
newest 20,000 ids). Then --pairs pairs of runs, off, on, off, on..., each ONE incremental
run_silver in a child process of its own, on a fresh copy of that lake (the same bronze,
silver and history before the batch): "off" with silver.history unset (the history
table is there, left alone), "on" with silver.history "*" (every column tracked). Per
run: run_silver's seconds, the child's peak RSS (VmHWM: Python and Sail) and where the
seconds went:

- stage all: every typed event of the batch staged as Parquet (history on only);
- stage: the batch's latest event per key, typed, staged (from the staged events when on);
- silver MERGE, tombstone MERGE: the two statements both runs make;
- versions: the history versions computed (each touched key's open version read from
  the history table, TOAST fill, window over the key's events) and staged;
- history MERGE: the versions merged into the history table on (key, _valid_from);
- history other: the rest of the history step (schema reads, key range, layout check);
- maintain: compaction and log trims after the run (history's included when on);
- other: the rest (bronze scan, type checks, progress, catalog).

After every run: the history table's rows, its live size (the bytes of its current
data files) and its size on disk (every file: the log, deletion vectors, and the files a
MERGE replaced, kept until a VACUUM), and what its newest commit touched. After each
pair: off's and on's silver tables are equal, and on's current versions are its silver
table. The 1-minute load average is recorded around every run: the machine is shared.
The report lists every run, then per case the medians, on/off (the target: at most 1.5)
and the history table's growth per million changes, then each step's median seconds,
off and on.

    python -m bench.history_bench [--changes 100000 1000000] [--rows 1000000 10000000]
                                  [--pairs 3] [--initial auto|silver|direct]
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
from dataclasses import replace
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bench.common import table, timed, work_and_results
from pipelines.positions import INDEX_DIGITS
from bench.silver_bench import (
    INGEST_COMMIT_ROWS, INITIAL_COMMIT_ROWS, SILVER_SCHEMA,
    Requests, append_bronze, build_base, batch_rows, bench_config, build_direct as silver_build_direct,
    initial_rows, last_commit, same_rows, silver_path, time_calls, timed_run_silver,
    vm_hwm_mb)

TARGET_RATIO = 1.5  # the target: history adds at most 50% to a run
MODES = ("off", "on")  # the order of the runs of a pair
STEPS = ("stage all", "stage", "silver MERGE", "tombstone MERGE", "versions", "history MERGE",
         "history other", "maintain", "other")


def history_path(lake: Path) -> Path:
    return lake / "silver_history" / "public" / "bench"


def history_config(lake: Path, history: bool):
    """silver_bench's config, with every table's history on (or left off)."""
    config = bench_config(lake)
    return replace(config, silver=replace(config.silver, history="*" if history else ()))


# --- child processes -------------------------------------------------------------------------

def phase_run(lake: Path, history: bool, out: Path) -> None:
    """One run_silver on the local engine (history on or off), its steps timed; results as
    JSON in `out`."""
    started = time.perf_counter()
    from pipelines.engine import start_local_session
    from pipelines.silver import history_tables, job, stage

    spark = start_local_session((lake / "_warehouse").resolve())
    spark.sql("SELECT 1").collect()
    startup = time.perf_counter() - started
    calls: list[tuple[str, float]] = []
    time_calls(calls, {"stage all": (stage, "stage_every"), "stage": (stage, "stage_newest"),
                       "history": (history_tables, "apply"),
                       "versions": (history_tables, "staged"), "maintain": (job, "_maintain")})
    requests = Requests()
    requests.install()
    run = timed_run_silver(history_config(lake, history), spark)
    out.write_text(json.dumps({**run, "startup": startup, "rss_peak_mb": vm_hwm_mb(),
                               "calls": calls, "requests": requests.calls}))


def child(lake: Path, mode: str, out: Path) -> tuple[dict, tuple[float, float]]:
    """A run in a child process: its JSON result and the 1-minute load before and after
    (peak RSS is read in the child: see silver_bench.child)."""
    load = os.getloadavg()[0]
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "error")}
    run = timed([sys.executable, "-m", "bench.history_bench", "--phase", "run", "--lake",
                 str(lake), "--history", mode, "--out", str(out)], env=env)
    if run.returncode != 0:
        raise SystemExit(f"child run (history {mode}) failed with exit {run.returncode}")
    return json.loads(out.read_text()), (load, os.getloadavg()[0])


# --- the parent: build, run, measure ---------------------------------------------------------

def build_silver(lake: Path, n: int, seed: int, work: Path) -> dict:
    """Bronze of n inserts, applied by one run_silver with history on."""
    bronze, _ = initial_rows(n, seed)
    append_bronze(lake, bronze, INITIAL_COMMIT_ROWS)
    del bronze
    result, load = child(lake, "on", work / "build.json")
    return {"method": "run_silver", "seconds": result["seconds"],
            "peak_mb": result["rss_peak_mb"], "load": load}


def open_versions(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """The history rows of silver rows no change has touched since their insert: one
    open version each, from the insert's position (positions.position_number, built
    from digits as position_columns.number_column builds it)."""
    digits = pc.binary_join_element_wise(
        pc.cast(rows["_lsn"], pa.string()),
        pc.utf8_lpad(pc.cast(rows["_change_index"], pa.string()), INDEX_DIGITS, "0"), "")
    n = rows.num_rows
    columns = {name: rows[name] for name in rows.column_names}
    columns.update(_valid_from=pc.cast(digits, pa.decimal128(38, 0)),
                   _valid_from_ts=rows["_commit_ts"], _is_current=pa.repeat(True, n),
                   _op=pa.repeat("insert", n))
    return pa.table([columns[f.name] if f.name in columns else pa.nulls(n, f.type)
                     for f in schema], schema=schema)


def build_direct(lake: Path, n: int, seed: int, work: Path) -> dict:
    """silver_bench.build_direct with the history table: run_silver (history on) applies
    the first transaction, so the pipeline creates every table; each file of rows
    appended to silver is appended to the history table as open versions."""
    from deltalake import write_deltalake

    from pipelines.lake import read_delta

    schema: list[pa.Schema] = []

    def first_run() -> None:
        child(lake, "on", work / "build.json")
        schema.append(read_delta(history_path(lake)).schema)  # the pipeline's own types

    def also(part: pa.Table) -> None:
        write_deltalake(str(history_path(lake)), open_versions(part, schema[0]),
                        mode="append")

    return silver_build_direct(lake, n, seed, first_run, also)


def table_size(path: Path) -> dict:
    """A Delta table's rows (and current versions), live bytes (its current data files)
    and bytes on disk (every file under it: log, deletion vectors, replaced files)."""
    from deltalake import DeltaTable

    from pipelines.lake import read_delta

    flags = read_delta(path, columns=["_is_current"])["_is_current"]
    files = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return {"rows": len(flags), "current": pc.sum(flags).as_py() or 0,
            "live_bytes": pc.sum(files["size_bytes"]).as_py() or 0,
            "disk_bytes": sum(p.stat().st_size for p in path.rglob("*") if p.is_file())}


def history_is_silver(lake: Path) -> bool:
    """The history table's current versions are the silver table, row for row."""
    from pipelines.lake import read_delta

    def rows(where: Path, filter=None) -> pa.Table:
        return (read_delta(where, columns=SILVER_SCHEMA.names, filter=filter)
                .cast(SILVER_SCHEMA).sort_by("id"))
    return rows(history_path(lake), pc.field("_is_current")).equals(rows(silver_path(lake)))


def steps_of(result: dict) -> dict[str, float]:
    """Seconds of a run per STEPS: function timers, and requests by label for the MERGE
    statements."""
    steps = dict.fromkeys(STEPS, 0.0)
    for name, seconds in result["calls"]:
        steps["history other" if name == "history" else name] += seconds
    merges = {"MERGE INTO silver": "silver MERGE", "MERGE INTO tombstones": "tombstone MERGE",
              "MERGE INTO history": "history MERGE"}
    for label, _, seconds in result["requests"]:
        if label in merges:
            steps[merges[label]] += seconds
    # history_tables.apply's own time holds the versions and the history MERGE
    steps["history other"] -= steps["versions"] + steps["history MERGE"]
    steps["other"] = result["seconds"] - sum(v for k, v in steps.items() if k != "other")
    return steps


def run_case(base: Path, work: Path, n: int, m: int, pairs: int, seed: int, verify: bool,
             toast_share: float, shape: str, before: dict) -> list[dict]:
    """The batch lands in a copy of the base lake; every run of the case applies it to a
    fresh copy of that lake, off and on in turn."""
    case = work / f"n{n}-m{m}"
    shutil.rmtree(case, ignore_errors=True)
    batched = case / "batched"
    shutil.copytree(base, batched)
    bronze, source = batch_rows(n, m, seed + n + m, toast_share, shape)
    append_bronze(batched, bronze, INGEST_COMMIT_ROWS)
    keys = source.num_rows
    del bronze, source
    results = []
    for pair in range(pairs):
        lakes = {}
        for mode in MODES:
            lake = lakes[mode] = case / f"{mode}-{pair}"
            shutil.copytree(batched, lake)
            result, load = child(lake, mode, case / f"{mode}-{pair}.json")
            size = table_size(history_path(lake))
            grew = {k: size[k] - before[k] for k in size}
            results.append({"n": n, "m": m, "pair": pair, "mode": mode, "keys": keys,
                            **result, "load": load, "history": size, "grew": grew,
                            "commit": last_commit(history_path(lake))})
            print(f"  N={n:,} M={m:,} pair {pair + 1} {mode}: {result['seconds']:.2f} s, "
                  f"peak {result['rss_peak_mb']:,.0f} MB, history +{grew['rows']:,} rows, "
                  f"load {load[0]:.1f}-{load[1]:.1f}", flush=True)
        if verify:
            checks = {"silver off = on": same_rows(silver_path(lakes["off"]),
                                                   silver_path(lakes["on"])),
                      "history current = silver": history_is_silver(lakes["on"])}
            results[-1]["verified"] = checks
            print("    " + "; ".join(f"{k}: {v}" for k, v in checks.items()), flush=True)
        for lake in lakes.values():
            shutil.rmtree(lake, ignore_errors=True)
    shutil.rmtree(case, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, nargs="+", default=[100_000],
                        help="batch sizes: bronze changes per run (default 100000)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000],
                        help="table sizes: rows before the batch (default 1000000)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="pairs of runs (off, on) per case (default 3)")
    parser.add_argument("--initial", choices=("auto", "silver", "direct"), default="auto",
                        help="build the N-row tables with run_silver, or directly (auto: "
                             "run_silver up to 1M rows, direct above)")
    parser.add_argument("--shape", choices=("recent", "uniform"), default="recent",
                        help="which keys a batch changes (silver_bench --shape)")
    parser.add_argument("--toast-share", type=float, default=0.0,
                        help="share of the updates that leave the name column unchanged")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the comparison of each pair's tables")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--phase", choices=("run",), help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--history", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "run":
        return phase_run(args.lake, args.history == "on", args.out)
    if args.pairs < 1 or min(args.changes + args.rows) < 1:
        parser.error("--pairs, --changes and --rows must be positive")

    with work_and_results(args.work, "history-bench-", args.json) as (work, builds, results):
        for n in args.rows:
            base, build = build_base(work, n, args.initial, args.seed,
                                     partial(build_silver, work=work),
                                     partial(build_direct, work=work))
            before = table_size(history_path(base))
            build.update(n=n, history=before)
            builds.append(build)
            print(f"built N={n:,} ({build['method']}): {build['seconds']:.1f} s, peak "
                  f"{build['peak_mb']:,.0f} MB, history {before['rows']:,} rows, "
                  f"{before['live_bytes'] / 2**20:.1f} MB", flush=True)
            for m in args.changes:
                results += run_case(base, work, n, m, args.pairs, args.seed,
                                    not args.no_verify, args.toast_share, args.shape, before)
            shutil.rmtree(base, ignore_errors=True)
    report(builds, results)


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def report(builds: list[dict], results: list[dict]) -> None:
    rows = [["table rows", "initial build", "seconds", "peak MB", "load 1m", "history rows",
             "history MB"]]
    for b in builds:
        rows.append([f"{b['n']:,}", b["method"], f"{b['seconds']:.1f}", f"{b['peak_mb']:,.0f}",
                     f"{b['load'][0]:.1f}-{b['load'][1]:.1f}", f"{b['history']['rows']:,}",
                     _mb(b["history"]["live_bytes"])])
    print("\n" + table(rows))

    rows = [["table rows", "changes", "pair", "history", "seconds", "peak MB",
             *(f"{s} s" for s in STEPS), "history +rows", "+live MB", "+disk MB",
             "files removed, added", "load 1m", "verified"]]
    for r in results:
        steps = steps_of(r)
        rows.append([f"{r['n']:,}", f"{r['m']:,}", str(r["pair"] + 1), r["mode"],
                     f"{r['seconds']:.2f}", f"{r['rss_peak_mb']:,.0f}",
                     *(f"{steps[s]:.2f}" for s in STEPS),
                     f"{r['grew']['rows']:,}", _mb(r["grew"]["live_bytes"]),
                     _mb(r["grew"]["disk_bytes"]),
                     f"{r['commit']['removed']}, {r['commit']['added']}" if r["mode"] == "on"
                     else "-", f"{r['load'][0]:.1f}-{r['load'][1]:.1f}",
                     str(all(r["verified"].values())) if "verified" in r else "-"])
    print("\n" + table(rows))

    cases: dict[tuple[int, int], dict[str, list[dict]]] = {}
    for r in results:
        cases.setdefault((r["n"], r["m"]), {mode: [] for mode in MODES})[r["mode"]].append(r)
    rows = [["table rows", "changes", "pairs", "off s", "on s", "on / off", "target",
             "added s", "off peak MB", "on peak MB", "history +rows per M changes",
             "+live MB per M changes", "+disk MB per M changes", "verified"]]
    profiles = []
    for (n, m), runs in cases.items():
        off, on = runs["off"], runs["on"]
        off_s = statistics.median(r["seconds"] for r in off)
        on_s = statistics.median(r["seconds"] for r in on)
        per_million = 1_000_000 / m
        grew = {k: statistics.median(r["grew"][k] for r in on) * per_million
                for k in ("rows", "live_bytes", "disk_bytes")}
        checks = [v for r in on if "verified" in r for v in r["verified"].values()]
        rows.append([f"{n:,}", f"{m:,}", str(len(on)), f"{off_s:.2f}", f"{on_s:.2f}",
                     f"{on_s / off_s:.2f}",
                     "met" if on_s / off_s <= TARGET_RATIO else "MISSED",
                     f"{on_s - off_s:.2f}",
                     f"{statistics.median(r['rss_peak_mb'] for r in off):,.0f}",
                     f"{statistics.median(r['rss_peak_mb'] for r in on):,.0f}",
                     f"{grew['rows']:,.0f}", _mb(grew["live_bytes"]), _mb(grew["disk_bytes"]),
                     str(all(checks)) if checks else "-"])
        median_steps = {s: (statistics.median(steps_of(r)[s] for r in off),
                            statistics.median(steps_of(r)[s] for r in on)) for s in STEPS}
        profiles.append((n, m, median_steps))
    print("\n" + table(rows))

    rows = [["table rows", "changes", "step", "off s", "on s", "on - off s"]]
    for n, m, median_steps in profiles:
        for step, (off_s, on_s) in median_steps.items():
            rows.append([f"{n:,}", f"{m:,}", step, f"{off_s:.2f}", f"{on_s:.2f}",
                         f"{on_s - off_s:+.2f}"])
    print("\n" + table(rows))
    print("\nSeconds: run_silver's own (the child's session start-up apart), Sail in-process; "
          "peak MB: the child's VmHWM (Python and Sail). Per case: medians of its runs; on / "
          f"off: the median on run's seconds over the median off run's (target <= "
          f"{TARGET_RATIO}); added s: their difference. Growth: the history table after an "
          "on run against before the batch, per million bronze changes: its rows, its live "
          "bytes (current data files) and its bytes on disk (log, deletion vectors, replaced "
          "files kept until a VACUUM). Steps: medians per step (see the module's docstring), "
          "off and on; history other includes the history table's schema reads, key range and "
          "layout check. verified: off's and on's silver tables equal, on's current "
          "versions equal to its silver table.")


if __name__ == "__main__":
    main()
