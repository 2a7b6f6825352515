"""Gold reports as small plain-text tables for people (the demo prints them at the end)."""

from __future__ import annotations

from typing import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.gold.definitions import Report, ReportSet
from pipelines.gold.io import GoldIO
from pipelines.terminal import format_table


def format_report(df: DataFrame, limit: int = 10) -> str:
    """The first `limit` rows of `df` as an aligned text table (one collect, no pandas)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    rows = df.limit(limit + 1).collect()
    out = [format_table(df.columns, rows[:limit])]
    if not rows:
        out.append("(no rows)")
    elif len(rows) > limit:
        out.append(f"(first {limit} rows)")
    return "\n".join(out)


def sorted_for_display(df: DataFrame, report: Report) -> DataFrame:
    """The report in its header's display order (the demo's: latest period first)."""
    keys = []
    for item in report.display_order:
        name, _, direction = item.partition(" ")
        keys.append(F.col(name).desc_nulls_last() if direction == "desc"
                    else F.col(name).asc_nulls_last())
    return df.orderBy(*keys)


def format_gold_reports(spark: SparkSession, io: GoldIO, definitions: ReportSet,
                        reports: Iterable[str] | None = None, limit: int = 10) -> str:
    """Every selected gold table, titled and formatted; tables not built yet are named as such."""
    blocks = []
    for report in definitions.select(reports):
        title = f"== {report.name}" + (f": {report.description}" if report.description else "")
        if not io.report_exists(report.name):
            blocks.append(f"{title}\n(not built yet: run `lakehouse gold`)")
            continue
        table = sorted_for_display(io.read_report(spark, report.name), report)
        blocks.append(f"{title}\n{format_report(table, limit)}")
    return "\n\n".join(blocks)
