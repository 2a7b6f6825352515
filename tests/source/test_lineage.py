"""The lineage decision as a function: slot state, server identity, timeline history and
the lake's current generation in, go on / record / refuse out (no server needed)."""

from __future__ import annotations

import pytest

from pipelines.bronze.generations import Generation, first_generation, next_generation
from pipelines.source.lineage import ServerIdentity, SlotState, check_lineage

SLOT = SlotState("pgoutput", "app", confirmed_flush_lsn=900)
RECORDED = Generation(0, "lakehouse", "7001", 1, 0, 0)


def check(slot=SLOT, server=ServerIdentity("7001", 1, 5000), current=RECORDED,
          bronze_end=1000, switches=None):
    return check_lineage("lakehouse", slot, server, lambda tli: switches or {}, current,
                         bronze_end)


def test_a_healthy_slot_goes_on():
    lineage = check()
    assert lineage.problem is None and lineage.record is None


def test_the_first_check_records_the_server():
    lineage = check(current=first_generation("lakehouse"))
    assert lineage.problem is None
    assert (lineage.record.system_identifier, lineage.record.timeline) == ("7001", 1)


@pytest.mark.parametrize("case, expected", [
    ({"slot": None}, "is missing, but bronze holds changes up to 0/3E8"),
    ({"slot": SlotState("pgoutput", "app", 900, wal_status="lost")}, "is invalidated"),
    ({"slot": SlotState("pgoutput", "app", 900, invalidation_reason="wal_removed")},
     "invalidated (wal_removed)"),
    ({"server": ServerIdentity("8002", 1, 5000)}, "another server"),
    ({"server": ServerIdentity("7001", 1, 990)}, "restored from a backup"),
    ({"server": ServerIdentity("7001", 2, 5000), "switches": {1: 950}},
     "only up to 0/3B6, but bronze holds changes up to 0/3E8"),
    ({"server": ServerIdentity("7001", 3, 5000), "switches": {2: 2000}},
     "does not descend from timeline 1"),
])
def test_a_broken_lineage_is_refused(case, expected):
    lineage = check(**case)
    assert expected in lineage.problem and lineage.record is None


def test_a_promotion_that_kept_bronze_continues_on_the_new_timeline():
    lineage = check(server=ServerIdentity("7001", 2, 5000), switches={1: 1000})
    assert lineage.problem is None
    assert lineage.record.generation == 0 and lineage.record.timeline == 2


def test_a_missing_slot_over_an_empty_lake_is_setups_to_create():
    assert check(slot=None, bronze_end=0).problem is None


def test_a_new_generation_sorts_after_bronze_and_checks_in_its_own_lsns():
    behind = next_generation(RECORDED, "lakehouse", "7001", 2, source_start_lsn=400,
                             bronze_end_lsn=1000, resync_tables=("public.t",), reason="x")
    assert behind.lsn_offset == 601 and behind.lake_start_lsn == 1001
    assert behind.to_lake(400) > 1000 and behind.to_source(1000) == 0
    ahead = next_generation(RECORDED, "lakehouse", "7001", 1, 5000, 1000, (), "x")
    assert ahead.lsn_offset == 0 and ahead.lake_start_lsn == 5000
    # bronze's end in the new generation's terms: nothing yet, so no refusal
    assert check(current=behind, server=ServerIdentity("7001", 2, 450),
                 bronze_end=1000).problem is None
