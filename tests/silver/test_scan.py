"""scan_bronze: the per-table summary silver plans each table's batch from, read from
bronze's files on the driver (its engine frame is read only for slices and resyncs)."""

from __future__ import annotations

import pytest

from pipelines.silver.scan import scan_bronze
from tests.support.bronze_builder import BronzeLake, Table

ITEMS = Table()
MEMBERS = Table("public.members", ("project", "member", "role"), ("int4", "int4", "text"),
                ("project", "member"))


@pytest.fixture
def scan(tmp_path):
    def summarized(rows, after=(0, 0), bounds=None, commits=1):
        lake = BronzeLake(tmp_path / "lake")
        for i in range(commits):  # the rows spread over files: their summaries add up
            lake.append_changes(rows[i::commits])
        return scan_bronze(lake.layout.bronze_changes, None, bounds or {}, after, None)
    return summarized


@pytest.mark.parametrize("commits", [1, 3])
def test_summary_counts_positions_key_moves_and_unchanged_columns(scan, commits):
    result = scan([
        ITEMS.insert(10, 0, id=1, name="a", doc="D1"),
        ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),
        ITEMS.update(12, 0, id=5, name="a3", doc="x", old_key={"id": 1}),
        ITEMS.delete(13, 0, id=5),
        MEMBERS.insert(14, 0, project=1, member=1, role="owner"),
        MEMBERS.update(15, 0, project=1, member=1, role="dev"),
    ], commits=commits)
    assert result.upto == (15, 0)
    items, members = result.tables["public.items"], result.tables["public.members"]
    assert (items.inserts, items.updates, items.deletes, items.moved) == (1, 2, 1, True)
    assert items.unchanged == {"doc"}
    assert (members.inserts, members.updates, members.moved) == (1, 1, False)
    assert members.unchanged == frozenset()  # its batch skips the TOAST fill


def test_only_new_rows_count(scan):
    result = scan([ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),
                   ITEMS.update(12, 0, id=1, name="a3")], after=(11, 0))
    assert result.tables["public.items"].unchanged == frozenset()
    assert result.tables["public.items"].updates == 1


def test_each_table_counts_after_its_own_bound(scan):
    result = scan([ITEMS.insert(10, 0, id=1, name="a"), ITEMS.insert(12, 0, id=2, name="b"),
                   MEMBERS.insert(11, 0, project=1, member=1, role="owner"),
                   ITEMS.insert(13, 0, id=3, name="c")],
                  bounds={"public.items": (12, 0)})
    assert result.tables["public.items"].inserts == 1  # only 13 is after its bound
    assert result.tables["public.members"].inserts == 1  # the default bound: all of it
    assert result.upto == (13, 0)


WIDER = Table("public.items", ("id", "name", "doc", "note"), ("int4", "text", "text", "text"))


def test_the_newest_shape_and_every_control_in_bronze_order(scan):
    result = scan([ITEMS.insert(10, 0, id=1, name="a"),
                   ITEMS.watermark(11, 0, "b1", 1, "low"),
                   ITEMS.truncate(12, 0),
                   WIDER.insert(13, 0, id=2, name="b", note="n"),
                   ITEMS.watermark(14, 0, "b1", 1, "high", {"xmin": 9, "xmax": 9, "xip": []},
                                   rows=0),
                   WIDER.truncate(15, 0)], commits=2)
    items = result.tables["public.items"]
    assert [c.name for c in items.shape.columns] == ["id", "name", "doc", "note"]
    assert items.truncate == (15, 0)
    assert [c.at for c in items.closings] == [(12, 0), (15, 0)]
    assert [(w.low, w.high) for w in items.windows] == [((11, 0), (14, 0))]


@pytest.fixture
def read(monkeypatch) -> list[str]:
    """The bronze files the summary reads, as it reads them."""
    from pipelines.silver import bronze_summary

    uris: list[str] = []
    reader = bronze_summary.read_data_file
    monkeypatch.setattr(bronze_summary, "read_data_file",
                        lambda *args: uris.append(args[1]) or reader(*args))
    return uris


def test_files_wholly_before_the_bounds_are_not_read(scan, read):
    result = scan([ITEMS.insert(lsn, 0, id=lsn, name="x") for lsn in (10, 20, 30)],
                  after=(25, 0), commits=3)
    assert result.tables["public.items"].inserts == 1 and len(read) == 1


@pytest.mark.parametrize("after, inserts, reads", [((20, 1), 1, 1), ((20, 0), 2, 2)])
def test_a_file_that_ends_at_the_bound_is_not_read(scan, read, after, inserts, reads):
    # two files, (10.0, 20.1) and (20.0, 30.0): past (20, 1) only the second has rows
    rows = [ITEMS.insert(10, 0, id=1, name="x"), ITEMS.insert(20, 0, id=2, name="y"),
            ITEMS.insert(20, 1, id=3, name="z"), ITEMS.insert(30, 0, id=4, name="w")]
    result = scan(rows, after=after, commits=2)
    assert result.tables["public.items"].inserts == inserts and len(read) == reads


def test_an_older_low_watermark_is_read_from_the_files_that_hold_watermarks(tmp_path, read):
    lake = BronzeLake(tmp_path / "lake")
    files = [[ITEMS.insert(10, 0, id=1, name="a"), ITEMS.watermark(11, 0, "b1", 1, "low")],
             [ITEMS.insert(12, 0, id=2, name="b")],  # no message: never read
             [ITEMS.watermark(14, 0, "b1", 1, "high", {"xmin": 9, "xmax": 9, "xip": []},
                              rows=0), ITEMS.insert(15, 0, id=3, name="c")]]
    for rows in files:
        lake.append_changes(rows)
    result = scan_bronze(lake.layout.bronze_changes, None, {}, (13, 0), None)
    assert [(w.low, w.high) for w in result.tables["public.items"].windows] == \
        [((11, 0), (14, 0))]
    # the new rows' file, then the one older file with a watermark
    assert len(read) == 2 and read[0] != read[1]
