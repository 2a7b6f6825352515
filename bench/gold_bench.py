"""An incremental gold refresh against a full recompute of the same daily report.

The lake holds a silver `time_entries` of --rows rows (default 10M) spread evenly over
--days UTC days (1,000: 10,000 entries a day, ids in the order of started_at, as a time
tracker writes them), its empty tombstone table, and the demo's report
`finished_entries_per_day` (`incremental by: day`), built once. Then, --repeat times:

1. a batch of --changes changes (100,000) is MERGEd into silver the way silver applies
   them (new positions): updates of entries of --touched-days days (10: 1% of the groups)
   that move a fifth of them to another of those days, a hundredth deleted (with their
   tombstones);
2. the incremental refresh: `run_gold` on the report, as `lakehouse gold` runs it;
3. the full recompute the report would need without `incremental by`: the same
   `run_gold` on the report without its header line (one Delta overwrite);

the two alternating, so both see the same machine; and the floor any refresh that
writes pays on this engine: one query of the new rows' newest position and one
one-row Delta append. After each incremental refresh the gold table is compared with the
full result (they must be equal). Printed: the seconds of each, their medians and
ratios, the silver rows each aggregated, the groups replaced, and the process's peak
RSS (Sail runs in-process; classic Spark's JVM apart).

    python -m bench.gold_bench [--engine sail|spark] [--rows 10000000] [--days 1000]
                               [--changes 100000] [--touched-days 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pipelines.catalog import TableNames
from pipelines.demo.run import DEMO_REPORTS
from pipelines.gold.definitions import ReportSet, load_reports
from pipelines.gold.io import TableGoldIO
from pipelines.gold.run import run_gold
from pipelines.gold.state import read_refreshes
from pipelines.lake import Lake
from pipelines.silver.maintenance import DELETION_VECTORS

from bench.common import table

REPORT = "finished_entries_per_day"
# silver's own layout: deletion vectors, so a MERGE writes its rows to new files, and
# files of a compacted table's size (classic Spark; Sail writes what it writes)
SILVER_LAYOUT = {DELETION_VECTORS: "true", "maxRecordsPerFile": "500000"}
DAY_MICROS = 86_400_000_000
START_DAY = 20_000  # 2024-10-04


def build_silver(spark, lake: Lake, rows: int, days: int) -> None:
    """`rows` entries, ids in started_at order, `rows // days` a day, 30 to 90 minutes."""
    per_day = rows // days
    spark.range(rows).selectExpr(
        "id", "id % 500 AS user_id", "CAST(id % 300 AS INT) AS project_id",
        f"timestamp_micros(({START_DAY} + id DIV {per_day}) * {DAY_MICROS}"
        f" + (id % {per_day}) * 8000000) AS started_at",
        f"timestamp_micros(({START_DAY} + id DIV {per_day}) * {DAY_MICROS}"
        f" + (id % {per_day}) * 8000000 + (30 + id % 61) * 60000000) AS stopped_at",
        "CAST(1 AS BIGINT) AS _lsn", "CAST(0 AS BIGINT) AS _change_index",
        "timestamp_micros(0) AS _commit_ts",
    ).write.format("delta").options(**SILVER_LAYOUT) \
        .save(lake.silver("public", "time_entries").uri)
    spark.range(0).selectExpr("id", "CAST(0 AS BIGINT) AS _lsn",
                              "CAST(0 AS BIGINT) AS _change_index",
                              "timestamp_micros(0) AS _commit_ts") \
        .write.format("delta").options(**SILVER_LAYOUT) \
        .save(lake.tombstones("public", "time_entries").uri)


def apply_batch(spark, lake: Lake, batch: int, rows: int, days: int, changes: int,
                touched: int) -> None:
    """`changes` updates (and a hundredth deletes) of entries of `touched` days, at
    positions after every earlier batch's, as silver's MERGE applies them."""
    per_day = rows // days
    first_day = (batch * 37) % (days - touched)
    ids = f"(({first_day} + (n % {touched})) * {per_day} + (n DIV {touched}) % {per_day})"
    lsn = 1000 * (batch + 1)
    moved = f"({START_DAY} + {first_day} + ((n + 1) % {touched}))"
    same = f"({START_DAY} + {first_day} + (n % {touched}))"
    day = f"CASE WHEN n % 5 = 0 THEN {moved} ELSE {same} END"
    spark.range(changes).selectExpr("id AS n").selectExpr(
        f"{ids} AS id", f"{ids} % 500 AS user_id", f"CAST({ids} % 300 AS INT) AS project_id",
        f"timestamp_micros({day} * {DAY_MICROS} + (n % 1000) * 60000000) AS started_at",
        f"timestamp_micros({day} * {DAY_MICROS} + (n % 1000) * 60000000 + 3600000000)"
        " AS stopped_at",
        f"CAST({lsn} AS BIGINT) AS _lsn", "n AS _change_index",
        "timestamp_micros(0) AS _commit_ts", "n % 100 = 7 AS deleted",
    ).createOrReplaceTempView("_bench_batch")
    silver = lake.silver("public", "time_entries").uri
    spark.sql(f"MERGE INTO delta.`{silver}` t USING _bench_batch s ON t.id = s.id "
              "WHEN MATCHED AND s.deleted THEN DELETE "
              "WHEN MATCHED THEN UPDATE SET t.user_id = s.user_id, t.project_id = s.project_id, "
              "t.started_at = s.started_at, t.stopped_at = s.stopped_at, t._lsn = s._lsn, "
              "t._change_index = s._change_index, t._commit_ts = s._commit_ts").collect()
    marks = lake.tombstones("public", "time_entries").uri
    (spark.table("_bench_batch").filter("deleted")
     .select("id", "_lsn", "_change_index", "_commit_ts")
     .write.format("delta").mode("append").save(marks))


def floor(spark, lake: Lake) -> None:
    """The least a refresh does: ask silver for its new rows, commit one row."""
    rows = spark.read.format("delta").load(lake.silver("public", "time_entries").uri)
    rows.filter("_lsn > 1000000000").agg({"_lsn": "max"}).collect()
    spark.range(1).write.format("delta").mode("append").save(lake.state("bench_floor").uri)


def timed(step) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["sail", "spark"], default="sail")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--touched-days", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from pipelines.engine import start_classic_session, start_local_session

    work = Path(tempfile.mkdtemp(prefix="lakehouse-gold-bench-"))
    spark = (start_local_session(work / "warehouse") if args.engine == "sail"
             else start_classic_session(work / "warehouse", "local[2]"))
    try:
        lake = Lake.of(work / "lake")
        reports = load_reports(DEMO_REPORTS, "lakehouse_silver", "lakehouse_gold")
        report = reports.get(REPORT)
        incremental = ReportSet(reports.directory, (report,))
        whole = ReportSet(reports.directory, (replace(report, incremental=None),))
        full_lake = Lake.of(work / "full")  # the plain report's gold table lives apart
        started = time.perf_counter()
        build_silver(spark, lake, args.rows, args.days)
        for name in ("silver", "_state"):
            shutil.copytree(Path(lake.root) / name, Path(full_lake.root) / name,
                            symlinks=True)
        print(f"silver: {args.rows:,} rows over {args.days:,} days, built in "
              f"{time.perf_counter() - started:.1f} s")
        run_gold(spark, TableGoldIO(spark, TableNames(lake)), incremental)

        lines = [["batch", "incremental s", "groups", "rows aggregated", "full s",
                  "rows aggregated", "floor s", "equal"]]
        increments, fulls, floors = [], [], []
        for batch in range(args.repeat):
            for where in (lake, full_lake):
                apply_batch(spark, where, batch, args.rows, args.days, args.changes,
                            args.touched_days)
            inc = timed(lambda: run_gold(spark, TableGoldIO(spark, TableNames(lake)),
                                         incremental))
            refresh = read_refreshes(lake)[REPORT]
            full = timed(lambda: run_gold(spark, TableGoldIO(spark, TableNames(full_lake)),
                                          whole))
            least = timed(lambda: floor(spark, lake))
            gold = spark.read.format("delta").load(lake.gold(REPORT).uri)
            expected = spark.read.format("delta").load(full_lake.gold(REPORT).uri)
            equal = (gold.exceptAll(expected).count() == 0
                     and expected.exceptAll(gold).count() == 0)
            touched_rows = args.touched_days * (args.rows // args.days)
            increments.append(inc)
            fulls.append(full)
            floors.append(least)
            lines.append([str(batch + 1), f"{inc:.2f}", f"{refresh.groups}",
                          f"~{touched_rows:,}", f"{full:.2f}", f"{args.rows:,}",
                          f"{least:.2f}", str(equal)])
            if not equal:
                raise SystemExit("the incremental refresh differs from the full recompute")
        inc, full = statistics.median(increments), statistics.median(fulls)
        least = statistics.median(floors)
        print(table(lines))
        print(f"median: incremental {inc:.2f} s, full {full:.2f} s: {full / inc:.1f}x faster "
              f"({args.engine}, {args.changes:,} changes in {args.touched_days} of "
              f"{args.days:,} days); floor {least:.2f} s: the full recompute is "
              f"{full / least:.1f}x the floor, the incremental refresh {inc / least:.1f}x")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {peak:,.0f} MB")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
