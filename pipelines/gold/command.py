"""`lakehouse gold`: rebuild the gold report tables from silver (one full recompute)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pipelines.gold.reports import REPORT_NAMES, REPORTS

if TYPE_CHECKING:
    from pipelines.config import Config

MISSING_SILVER_EXIT = 2  # a report asked for by name could not be built yet


def add_parser(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    reports = "\n".join(f"  {spec.name}: {spec.description}" for spec in REPORTS.values())
    parser = verbs.add_parser(
        "gold", help="rebuild the gold report tables from silver",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Recompute the gold report aggregates with Spark SQL over the silver\n"
        "tables and overwrite each report's Delta table: <lake>/gold/<report>, or\n"
        "<databricks.catalog>.<databricks.gold_schema>.<report> with engine databricks.\n"
        "Prints one line per report. A report whose silver tables do not exist is skipped\n"
        "with a warning (exit 0: the source may simply not have those tables); with\n"
        "--report, a skipped report is an error (exit 2: run `lakehouse silver` first).\n\n"
        f"reports:\n{reports}")
    parser.add_argument("--report", dest="reports", metavar="NAME", action="extend",
                        nargs="+", choices=REPORT_NAMES,
                        help="only these reports (repeatable; default: all)")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace, config: "Config") -> int:
    from pipelines.engine import get_spark
    from pipelines.gold.io import gold_io_for
    from pipelines.gold.run import run_gold
    from pipelines.lake import Lake

    spark = get_spark(config)
    result = run_gold(spark, Lake.from_config(config), args.reports,
                      io=gold_io_for(config, spark))
    for run in result.runs:
        print(run.summary())
    return MISSING_SILVER_EXIT if result.skipped and args.reports else 0
