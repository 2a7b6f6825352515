"""`lakehouse setup`: check the source and create its publication and slot."""

from __future__ import annotations

import argparse

from pipelines.config import Config


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "setup", help="check the source and create the publication and slot (idempotent)",
        description="Check wal_level, replication capacity, the REPLICATION privilege and "
        "that every configured table has a primary key or replica identity index; then "
        "create the publication and the pgoutput replication slot if missing. Safe to "
        "run again: it changes nothing when everything is in place.")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, config: Config) -> int:
    from pipelines.lake import Lake
    from pipelines.source.setup import run_setup

    lake = Lake.from_config(config)
    lake.check_conditional_writes()
    report = run_setup(config.source, lake)
    publication = ("created" if report.publication_created
                   else "updated" if report.publication_changed else "unchanged")
    print(f"tables:      {', '.join(report.tables)}")
    print(f"publication: {config.source.publication} ({publication})")
    print(f"slot:        {config.source.slot} "
          f"({'created' if report.slot_created else 'exists'}, at {report.slot_lsn})")
    print(f"lake:        {lake.root}" + ("" if lake.is_local else " (conditional writes: ok)"))
    return 0
