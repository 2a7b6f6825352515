"""`lakehouse gold`: rebuild the user's gold reports (`gold.reports`) from silver."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.config import Config

SKIPPED_EXIT = 2  # a report could not be built: a table it reads is missing


def add_parser(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = verbs.add_parser(
        "gold", help="rebuild the gold report tables from silver",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run each report of the config's gold.reports directory (one\n"
        "<report>.sql file each, docs/gold.md) with Spark SQL over the silver tables\n"
        "and other reports, in dependency order, and write the report's Delta table:\n"
        "<lake>/gold/<report>, or <databricks.catalog>.<databricks.gold_schema>.<report>\n"
        "with engine databricks. A report whose header says `incremental by: <column>`\n"
        "is refreshed by the groups of that column that silver changed since its last\n"
        "refresh; the others are rebuilt whole. Prints one line per report.\n\n"
        "A report that fails is logged and nothing of it is written; the reports that do\n"
        "not read it are still built. Exit 2: a report file is wrong (named in the\n"
        "message), or a report was skipped because a table it reads does not exist yet;\n"
        "exit 4: a value does not fit a report's column type.")
    parser.add_argument("--report", dest="reports", metavar="NAME", action="extend",
                        nargs="+", help="only these reports (repeatable; default: all); "
                        "the reports they read are used as they are")
    parser.add_argument("--full", action="store_true",
                        help="rebuild every selected report whole, incremental ones too, "
                        "and take the columns of reports without a `-- columns:` header "
                        "from their query again instead of keeping the existing table's")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace, config: "Config") -> int:
    from pipelines.engine import get_spark
    from pipelines.gold.definitions import configured_reports
    from pipelines.gold.io import gold_io_for
    from pipelines.gold.run import run_gold

    definitions = configured_reports(config)  # a bad file: exit 2 before the engine starts
    if definitions is None:
        print("no gold reports configured: set gold.reports to a directory of "
              "<report>.sql files (docs/gold.md)")
        return 0
    definitions.select(args.reports)
    spark = get_spark(config)
    result = run_gold(spark, gold_io_for(config, spark), definitions, args.reports,
                      full=args.full, parallel=config.gold.parallel_reports)
    for run in result.runs:
        print(run.summary())
    if result.failed:
        return result.failed[0].exit_code
    return SKIPPED_EXIT if result.skipped else 0
