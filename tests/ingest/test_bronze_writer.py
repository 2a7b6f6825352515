"""The bronze writer: positions from transaction spans, background commits, durability.

Real Delta tables under tmp_path; no Postgres needed.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from pipelines.ingest.bronze_writer import BronzeWriter, Progress, _Batch, _Span, read_progress
from pipelines.ingest.records import change_record, record_batch
from pipelines.ingest.relations import TableInfo
from pipelines.lake import read_delta

TABLE = TableInfo("public", "t", ("id", "v"), ("int4", "text"), (23, 25), (-1, -1), ("id",))
TS = 1_767_225_600_000_000  # 2026-01-01 UTC in Unix microseconds


def insert(value: str):
    return change_record("insert", TABLE, (value, None), ())


def landed(path) -> list[tuple]:
    rows = read_delta(path).sort_by([("commit_lsn", "ascending"),
                                     ("change_index", "ascending")]).to_pylist()
    return [(r["commit_lsn"], r["change_index"], r["xid"], r["values"][0]) for r in rows]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "bronze" / "changes"


def test_positions_follow_transactions_across_a_partial_commit(path):
    writer = BronzeWriter(path, "slot")
    writer.begin(100, 0, 7, TS)
    for value in "abc":
        writer.append(insert(value))
    writer.end_unit(150)
    writer.begin(200, 0, 8, TS)
    writer.append(insert("d"))
    writer.append(insert("e"))
    writer.land(complete_only=False)  # cuts transaction 200 after its second change
    assert writer.progress == Progress(150, (200, 1))
    assert writer.next_index == 2
    for value in "fgh":
        writer.append(insert(value))
    writer.end_unit(250)
    assert writer.flush() == Progress(250, (200, 4))
    writer.close()
    assert landed(path) == [(100, 0, 7, "a"), (100, 1, 7, "b"), (100, 2, 7, "c"),
                            (200, 0, 8, "d"), (200, 1, 8, "e"), (200, 2, 8, "f"),
                            (200, 3, 8, "g"), (200, 4, 8, "h")]
    assert read_progress(path, "slot") == Progress(250, (200, 4))
    rows = read_delta(path).to_pylist()
    assert {r["commit_ts"].timestamp() for r in rows} == {TS / 1e6}
    assert {(r["schema_name"], r["table_name"], tuple(r["columns"])) for r in rows} == {
        ("public", "t", ("id", "v"))}


def test_a_restarted_writer_knows_what_to_skip(path):
    writer = BronzeWriter(path, "slot")
    writer.begin(200, 0, 8, TS)
    writer.append(insert("a"))
    writer.append(insert("b"))
    writer.flush(complete_only=False)
    writer.close()
    again = BronzeWriter(path, "slot")
    assert again.first_new_index(200) == 2  # resume inside the transaction
    assert again.first_new_index(300) == 0
    assert again.first_new_index(100) > 2**32  # an older transaction: all of it is there
    assert again.landed(200, 1) and not again.landed(200, 2)


def test_records_already_in_arrow_land_before_the_transaction_tail(path):
    writer = BronzeWriter(path, "slot")
    writer.begin(100, 0, 7, TS)
    writer.append(insert("buffered"))
    writer.end_unit(150)
    spilled = record_batch([insert("s0"), insert("s1")])
    writer.land_arrow([spilled], 300, 0, 9, TS)  # lands the buffered transaction first
    writer.begin(300, 2, 9, TS)
    writer.append(insert("tail"))
    writer.end_unit(350)
    assert writer.flush() == Progress(350, (300, 2))
    writer.close()
    assert landed(path) == [(100, 0, 7, "buffered"), (300, 0, 9, "s0"), (300, 1, 9, "s1"),
                            (300, 2, 9, "tail")]


def test_arrow_records_can_end_their_transaction(path):
    writer = BronzeWriter(path, "slot")
    writer.land_arrow([record_batch([insert("a")]), record_batch([insert("b")])],
                      300, 0, 9, TS, end_lsn=350)
    assert writer.wait() == Progress(350, (300, 1))
    writer.close()


def test_discarding_an_incomplete_transaction_keeps_whole_ones(path):
    writer = BronzeWriter(path, "slot")
    writer.begin(100, 0, 7, TS)
    writer.append(insert("a"))
    writer.end_unit(150)
    writer.begin(200, 0, 8, TS)
    writer.append(insert("lost"))
    writer.discard_incomplete()  # the connection broke: the server resends 200
    writer.begin(200, 0, 8, TS)
    writer.append(insert("b"))
    writer.end_unit(250)
    writer.flush()
    writer.close()
    assert landed(path) == [(100, 0, 7, "a"), (200, 0, 8, "b")]


def test_durable_advances_only_when_the_commit_has_finished(path, monkeypatch):
    writer = BronzeWriter(path, "slot")
    release = threading.Event()
    commit = writer._commit

    def slow_commit(batch):
        release.wait(10)
        commit(batch)

    monkeypatch.setattr(writer, "_commit", slow_commit)
    writer.begin(100, 0, 7, TS)
    writer.append(insert("a"))
    writer.end_unit(150)
    writer.land()
    assert writer.progress.end_lsn == 150  # handed over ...
    assert writer.durable == Progress() and not writer.idle  # ... but not in bronze yet
    release.set()
    assert writer.wait() == Progress(150, (100, 0))
    assert writer.idle
    writer.close()


def test_a_failed_commit_stops_every_later_one_and_is_raised(path, monkeypatch):
    writer = BronzeWriter(path, "slot")
    commit, calls = writer._commit, []

    def failing_second_commit(batch):
        calls.append(batch.progress.end_lsn)
        if len(calls) == 2:
            raise OSError("disk full")
        commit(batch)

    monkeypatch.setattr(writer, "_commit", failing_second_commit)
    for lsn in (100, 200, 300):  # the third is handed over before or after the failure
        writer.begin(lsn, 0, 1, TS)
        writer.append(insert(str(lsn)))
        writer.end_unit(lsn + 50)
        try:
            writer.land()
        except OSError:
            break
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    with pytest.raises(OSError, match="disk full"):
        writer.land()
    assert calls == [150, 250]  # 300 was not committed: it would skip 200's position
    writer.close(raise_failure=False)
    assert landed(path) == [(100, 0, 1, "100")]
    assert read_progress(path, "slot") == Progress(150, (100, 0))


def test_a_batch_handed_over_after_a_failure_is_not_committed(path, monkeypatch):
    """land() checks for a failure first, but a commit can fail while land() waits for
    it: the committer then drops the batch handed over next."""
    writer = BronzeWriter(path, "slot")

    def fail(batch):
        raise OSError("disk full")

    monkeypatch.setattr(writer, "_commit", fail)
    writer.begin(100, 0, 1, TS)
    writer.append(insert("a"))
    writer.end_unit(150)
    writer.land()
    writer._batches.join()  # the commit has failed
    committed = []
    monkeypatch.setattr(writer, "_commit", committed.append)
    writer._submit(_Batch([insert("b")], [_Span(0, 200, 0, 1, TS)], Progress(250, (200, 0))))
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    assert committed == []
    writer.close(raise_failure=False)


def test_record_batch_matches_the_schema_for_every_kind_of_record():
    from pipelines.ingest.records import RECORD_SCHEMA, message_record, truncate_record

    batch = record_batch([
        change_record("update", TABLE, ("1", None), ("v",), "K", ("0", None)),
        truncate_record(TABLE, True, False),
        message_record("lakehouse.watermark", b"{}", True),
        change_record("delete", TABLE, (None, None), (), "O", ("1", "x")),
    ])
    assert batch.schema == RECORD_SCHEMA
    rows = pa.Table.from_batches([batch]).to_pylist()
    assert [r["op"] for r in rows] == ["update", "truncate", "message", "delete"]
    assert rows[0]["unchanged_toast"] == ["v"] and rows[0]["old_values"] == ["0", None]
    assert rows[1]["truncate_cascade"] is True and rows[1]["values"] is None
    assert rows[2]["table_name"] is None and rows[2]["message_content"] == b"{}"
    assert rows[3]["key_columns"] == ["id"] and rows[3]["type_oids"] == [23, 25]


def test_an_end_lsn_after_every_row_landed_gets_a_commit_of_its_own(path):
    writer = BronzeWriter(path, "slot")
    writer.begin(200, 0, 8, TS)
    writer.append(insert("a"))
    writer.append(insert("b"))
    writer.land(complete_only=False)  # a full batch, cut at the transaction's last change
    writer.end_unit(250, 200)  # then its Commit arrives
    assert writer.wait() == Progress(250, (200, 1))
    writer.close()
    assert read_progress(path, "slot") == Progress(250, (200, 1))
    assert landed(path) == [(200, 0, 8, "a"), (200, 1, 8, "b")]



@pytest.mark.parametrize("before, setting", [
    (None, None),  # a lake made before the retention; lake.log_retention not set
    ("interval 10 minutes", "7 days"),  # lake.log_retention changed since
])
def test_an_older_bronze_table_gets_the_log_retention_in_a_commit_with_the_position(
        path, before, setting):
    from deltalake import DeltaTable

    from pipelines.bronze.schema import CHANGES_SCHEMA
    from pipelines.lake import LOG_RETENTION, Lake

    DeltaTable.create(str(path), schema=CHANGES_SCHEMA,
                      configuration={"delta.logRetentionDuration": before} if before else None)
    old = BronzeWriter(path, "slot")
    old._table = DeltaTable(str(path))  # as the ingest of then: its retention left alone
    old.begin(100, 0, 7, TS)
    old.append(insert("a"))
    old.end_unit(150)
    old.flush()
    old.close()
    assert DeltaTable(str(path)).metadata().configuration.get("delta.logRetentionDuration") == before

    where = Lake.of(path.parent.parent, log_retention=setting or LOG_RETENTION).bronze_changes
    writer = BronzeWriter(where, "slot")
    writer.begin(200, 0, 8, TS)
    writer.append(insert("b"))
    writer.end_unit(250)
    assert writer.flush() == Progress(250, (200, 0))
    writer.close()
    table = DeltaTable(str(path))
    assert table.metadata().configuration["delta.logRetentionDuration"] == where.log_retention
    newest = table.history(limit=2)  # the rows' commit, then the retention's
    assert [c.get("lakehouse.position") for c in newest] == ["200:0", "100:0"]
    assert newest[1]["operation"] == "SET TBLPROPERTIES"
    assert read_progress(path, "slot") == Progress(250, (200, 0))
