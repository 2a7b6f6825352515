"""`lakehouse recover`: the CLI verb around run_recover."""

from __future__ import annotations

import argparse

from pipelines.config import Config
from pipelines.positions import format_lsn


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "recover", help="continue in place after a lost slot or a failover",
        description="When the replication slot no longer continues what bronze holds "
        "(dropped, invalidated, another server, or a failover to a standby that missed "
        "changes), start a new slot generation on the current source and schedule a resync "
        "of every captured table (or the ones named): a backfill that also deletes from "
        "silver the rows the source no longer has. Then run `lakehouse ingest` (or `run`) and "
        "`lakehouse backfill`. Does nothing when the slot is healthy.")
    parser.add_argument("tables", nargs="*", metavar="TABLE",
                        help="schema.table to resync (default: every captured table; a "
                        "table left out keeps rows the source may no longer have)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, config: Config) -> int:
    from pipelines.recover.run import run_recover

    report = run_recover(config, args.tables or None)
    g = report.generation
    if report.problem is None:
        print(f"nothing to recover: slot {g.slot} continues slot generation {g.generation} "
              "of this lake (to repair one table, run `lakehouse backfill --resync TABLE`)")
        return 0
    print(f"found:       {report.problem}")
    print(f"slot:        {g.slot} ({'replaced' if report.dropped_slot else 'created'}, "
          f"at {report.slot_lsn})")
    print(f"generation:  {g.generation} (server {g.system_identifier}, timeline {g.timeline}; "
          f"lake positions from {format_lsn(g.lake_start_lsn)})")
    print(f"resync:      {', '.join(g.resync_tables)}")
    print("next:        run `lakehouse ingest` (or `lakehouse run`) and `lakehouse backfill`; "
          "`lakehouse status` shows the resyncs")
    return 0
