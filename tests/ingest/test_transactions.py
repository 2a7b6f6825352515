"""Transaction assembly from pgoutput bytes to bronze, without a server.

Messages are built with struct.pack helpers and fed as XLogData frames the way the
ingest loop does; bronze is a real Delta table under tmp_path. Covers plain and
streamed transactions through both decode paths, the spill to bronze files, aborts, and
replays after a crash in the middle of a transaction.
"""

from __future__ import annotations

import json
import time

import pytest

from pipelines.errors import DataError
from pipelines.ingest.bronze_writer import BronzeWriter, Progress, read_progress
from pipelines.ingest.transactions import ChangeAssembler
from pipelines.lake import read_delta
from tests.support.pgoutput_bytes import (
    TS_US, begin, binary, commit, delete, i64, insert, message, relation, text, truncate,
    tuple_data, u8, u32, u64, update)

OID = 16385
FRAME_HEADER = b"w" + bytes(24)
COLUMNS = [(1, "id", 23, -1), (0, "v", 25, -1)]
RELATION = relation(OID, "public", "items", "d", COLUMNS)


def stream_start(xid: int, first: bool = False) -> bytes:
    return b"S" + u32(xid) + u8(first)


def stream_commit(xid: int, commit_lsn: int, end_lsn: int) -> bytes:
    return b"c" + u32(xid) + u8(0) + u64(commit_lsn) + u64(end_lsn) + i64(TS_US)


def stream_abort(xid: int, subxid: int) -> bytes:
    return b"A" + u32(xid) + u32(subxid)


def row(key: int, value: str = "v", xid: int | None = None) -> bytes:
    return insert(OID, tuple_data(text(str(key)), text(value)), xid=xid)


def feed(assembler: ChangeAssembler, messages: list[bytes]) -> None:
    for data in messages:
        assembler.feed_bytes(FRAME_HEADER + data, len(FRAME_HEADER))


def ingest(path, messages: list[bytes], batch_rows: int = 4, spill_rows: int = 5):
    writer = BronzeWriter(path, "slot")
    assembler = ChangeAssembler(writer, spill_rows, batch_rows)
    feed(assembler, messages)
    writer.flush()
    writer.close()
    return assembler


def bronze(path) -> list[tuple]:
    rows = read_delta(path).sort_by([("commit_lsn", "ascending"),
                                     ("change_index", "ascending")]).to_pylist()
    return [(r["commit_lsn"], r["change_index"], r["op"],
             r["values"][0] if r["values"] else r["message_prefix"] or r["table_name"])
            for r in rows]


def plain_transaction(lsn: int, keys: range, xid: int = 700) -> list[bytes]:
    return [begin(lsn, TS_US, xid), *(row(k) for k in keys), commit(lsn, lsn + 8, TS_US)]


def streamed_transaction(xid: int, lsn: int) -> list[bytes]:
    """12 inserts in three blocks; subtransaction xid+1 (keys 100..102) rolls back."""
    return [
        stream_start(xid, first=True), relation(OID, "public", "items", "d", COLUMNS, xid=xid),
        *(row(k, xid=xid) for k in range(0, 5)),
        b"E",
        stream_start(xid), *(row(k, xid=xid + 1) for k in range(100, 103)),
        *(row(k, xid=xid) for k in range(5, 9)), b"E",
        stream_abort(xid, xid + 1),
        stream_start(xid), *(row(k, xid=xid) for k in range(9, 12)), b"E",
        stream_commit(xid, lsn, lsn + 8),
    ]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "bronze" / "changes"


def test_plain_transactions_land_with_positions(path):
    report = ingest(path, [RELATION, *plain_transaction(100, range(3)),
                           *plain_transaction(200, range(3, 9))])
    assert bronze(path) == [(100, i, "insert", str(i)) for i in range(3)] + [
        (200, i, "insert", str(i + 3)) for i in range(6)]
    assert (report.transactions, report.changes) == (2, 9)


def test_every_kind_of_change_through_both_decode_paths(path):
    changes = [
        row(1, "é"),  # fast path
        update(OID, tuple_data(text("1"), b"u")),  # fast path, unchanged TOAST
        update(OID, tuple_data(text("2"), text("x")), old=tuple_data(text("1"), b"n"),
               old_kind=b"K"),
        delete(OID, b"O", tuple_data(text("2"), text("x"))),
        truncate([OID, OID], 1),  # reference path: one row per table
        message(1, 150, "lakehouse.watermark", b"{}"),  # reference path
    ]
    ingest(path, [RELATION, begin(100, TS_US, 7), *changes, commit(100, 108, TS_US)])
    rows = read_delta(path).sort_by("change_index").to_pylist()
    assert [(r["change_index"], r["op"]) for r in rows] == [
        (0, "insert"), (1, "update"), (2, "update"), (3, "delete"), (4, "truncate"),
        (5, "truncate"), (6, "message")]
    assert rows[1]["unchanged_toast"] == ["v"] and rows[1]["values"] == ["1", None]
    assert rows[2]["old_kind"] == "K" and rows[2]["old_values"] == ["1", None]
    assert rows[3]["values"] == [None, None] and rows[3]["old_values"] == ["2", "x"]
    assert rows[4]["truncate_cascade"] is True
    assert rows[6]["message_prefix"] == "lakehouse.watermark"


def test_binary_values_are_refused_by_the_reference_path(path):
    writer = BronzeWriter(path, "slot")
    assembler = ChangeAssembler(writer, 5)
    bad = insert(OID, tuple_data(text("1"), binary(b"\x00")))
    with pytest.raises(DataError, match="binary tuple data"):
        feed(assembler, [RELATION, begin(100, TS_US, 7), bad])
    writer.close()


@pytest.mark.parametrize(("data", "problem"), [
    (b"", "empty message"), (b"Z", "unknown message type 'Z'"),
    (begin(1, TS_US, 7)[:-1], "Begin needs 20 bytes"), (row(1)[:-1], "needs 1 bytes")])
def test_bad_messages_raise_data_errors_on_either_path(path, data, problem):
    writer = BronzeWriter(path, "slot")
    assembler = ChangeAssembler(writer, 5)
    feed(assembler, [RELATION, begin(100, TS_US, 7)])
    with pytest.raises(DataError, match=problem):  # exit 4 with the LSN and a hex dump
        feed(assembler, [data])
    writer.close()


def test_streamed_transaction_spills_to_arrow_and_drops_its_aborted_subtransaction(path):
    report = ingest(path, streamed_transaction(900, 500))
    assert bronze(path) == [(500, i, "insert", str(i)) for i in range(12)]
    assert (report.transactions, report.changes) == (1, 12)


def test_streams_interleave_with_plain_transactions_and_whole_aborts(path):
    messages = [
        RELATION, stream_start(900, first=True), *(row(k, xid=900) for k in range(6)), b"E",
        stream_start(950, first=True), *(row(k, xid=950) for k in range(50, 57)), b"E",
        *plain_transaction(300, range(20, 22)),
        stream_abort(950, 950),  # the whole second stream rolls back
        stream_start(900), row(6, xid=900), b"E",
        stream_commit(900, 500, 508),
    ]
    ingest(path, messages)
    assert bronze(path) == [(300, 0, "insert", "20"), (300, 1, "insert", "21")] + [
        (500, i, "insert", str(i)) for i in range(7)]


def test_a_non_transactional_message_lands_at_its_own_lsn(path):
    ingest(path, [message(0, 50, "p", b"now"), RELATION, *plain_transaction(100, range(1))])
    assert bronze(path) == [(50, 0, "message", "p"), (100, 0, "insert", "0")]


def run_like_the_ingest_loop(path, messages: list[bytes], writer=None):
    """Feed messages one by one, landing whenever a batch is full (as run.py does)."""
    writer = writer or BronzeWriter(path, "slot")
    assembler = ChangeAssembler(writer, spill_rows=2, batch_rows=3)
    for data in messages:
        feed(assembler, [data])
        if writer.buffered_rows >= 3:
            writer.land(complete_only=False)
    writer.flush()
    writer.close()
    return assembler


@pytest.mark.parametrize(("kind", "commits_before_crash"), [
    ("plain", 1), ("plain", 3), ("streamed", 1), ("streamed", 2), ("streamed", 3)])
def test_replay_after_a_crash_inside_a_transaction_lands_each_change_once(
        path, monkeypatch, kind, commits_before_crash):
    """Bronze holds part of a big transaction; the server resends all of it."""
    if kind == "plain":
        messages = [RELATION, *plain_transaction(100, range(11))]
        expected = [(100, i, "insert", str(i)) for i in range(11)]
    else:  # spilled in blocks of 2, landed in commits of about 3, one record in memory
        messages = streamed_transaction(900, 500)
        expected = [(500, i, "insert", str(i)) for i in range(12)]
    writer = BronzeWriter(path, "slot")
    commit_, done = writer._commit, []

    def crash_after_some_commits(batch):
        if len(done) == commits_before_crash:
            raise SystemExit("killed")
        commit_(batch)
        done.append(batch)

    monkeypatch.setattr(writer, "_commit", crash_after_some_commits)
    with pytest.raises(SystemExit):
        run_like_the_ingest_loop(path, messages, writer)
    writer.close(raise_failure=False)
    partial = bronze(path)
    assert 0 < len(partial) < len(expected) and partial == expected[:len(partial)]

    report = run_like_the_ingest_loop(path, messages)  # the server resends it all
    assert bronze(path) == expected
    assert report.changes == len(expected) - len(partial)


def test_replay_with_other_settings_resumes_inside_a_spilled_block(path, monkeypatch):
    messages = streamed_transaction(900, 500)
    writer = BronzeWriter(path, "slot")
    commit_ = writer._commit

    def crash_after_the_first_commit(batch):
        commit_(batch)
        raise SystemExit("killed")

    monkeypatch.setattr(writer, "_commit", crash_after_the_first_commit)
    with pytest.raises(SystemExit):
        run_like_the_ingest_loop(path, messages, writer)
    writer.close(raise_failure=False)
    assert len(bronze(path)) == 4
    ingest(path, messages, batch_rows=4, spill_rows=5)  # blocks of 5: resume at the 5th row
    assert bronze(path) == [(500, i, "insert", str(i)) for i in range(12)]


def streamed_without_aborts(xid: int, lsn: int, keys: range) -> list[bytes]:
    """One stream block per 7 keys, then the commit."""
    blocks = [keys[i:i + 7] for i in range(0, len(keys), 7)]
    return [stream_start(xid, first=True),
            relation(OID, "public", "items", "d", COLUMNS, xid=xid),
            *(message for block in blocks
              for message in [*(row(k, xid=xid) for k in block), b"E", stream_start(xid)]),
            b"E", stream_commit(xid, lsn, lsn + 8)]


def commits(path) -> list[list[dict]]:
    """The add actions of each commit to the table after its creation, oldest first."""
    logs = sorted((path / "_delta_log").glob("*.json"))[1:]
    return [[json.loads(line)["add"] for line in log.read_text().splitlines()
             if line.startswith('{"add"')] for log in logs]


def test_a_streamed_transaction_lands_as_the_files_it_was_encoded_to(path):
    before = time.time()
    report = ingest(path, streamed_without_aborts(900, 500, range(12)))  # spill_rows=5
    assert bronze(path) == [(500, i, "insert", str(i)) for i in range(12)]
    assert (report.transactions, report.changes) == (1, 12)
    assert read_progress(path, "slot") == Progress(508, (500, 11))
    [adds] = commits(path)  # one commit: two spilled blocks and the last two records
    stats = [json.loads(add["stats"]) for add in adds]
    assert [(s["numRecords"], s["minValues"]["commit_lsn"], s["maxValues"]["commit_lsn"],
             s["minValues"]["change_index"], s["maxValues"]["change_index"],
             s["minValues"]["xid"], s["nullCount"]["commit_ts"]) for s in stats] == [
        (5, 500, 500, 0, 4, 900, 0), (5, 500, 500, 5, 9, 900, 0), (2, 500, 500, 10, 11, 900, 0)]
    rows = read_delta(path).to_pylist()
    unix_ts = TS_US / 1e6 + 946_684_800  # TS_US counts from 2000-01-01
    assert {(r["xid"], r["commit_ts"].timestamp()) for r in rows} == {(900, unix_ts)}
    assert all(before <= r["ingested_at"].timestamp() <= time.time() for r in rows)
    assert sorted(p.name for p in path.glob("*.parquet")) == sorted(a["path"] for a in adds)


def test_a_replayed_streamed_transaction_leaves_no_files_behind(path):
    messages = streamed_without_aborts(900, 500, range(12))
    ingest(path, messages)
    files = sorted(path.glob("*.parquet"))
    report = ingest(path, messages)  # the server resends it: bronze has all of it
    assert bronze(path) == [(500, i, "insert", str(i)) for i in range(12)]
    assert report.changes == 0 and sorted(path.glob("*.parquet")) == files


def test_a_crash_before_the_files_are_committed_lands_them_all_on_replay(path, monkeypatch):
    messages = [RELATION, *plain_transaction(100, range(2)),
                *streamed_without_aborts(900, 500, range(12))]
    writer = BronzeWriter(path, "slot")
    commit_ = writer._commit

    def crash_at_the_stream_commit(batch):
        if batch.progress.end_lsn == 508:
            raise SystemExit("killed")
        commit_(batch)

    monkeypatch.setattr(writer, "_commit", crash_at_the_stream_commit)
    with pytest.raises(SystemExit):
        run_like_the_ingest_loop(path, messages, writer)
    writer.close(raise_failure=False)
    assert bronze(path) == [(100, 0, "insert", "0"), (100, 1, "insert", "1")]
    report = run_like_the_ingest_loop(path, messages)
    assert bronze(path) == [(100, 0, "insert", "0"), (100, 1, "insert", "1")] + [
        (500, i, "insert", str(i)) for i in range(12)]
    assert report.changes == 12


@pytest.mark.parametrize("kind", ["plain", "streamed"])
def test_a_transaction_ending_exactly_at_a_full_batch_records_its_end_lsn(path, kind):
    """The batch lands at the transaction's last change, before its Commit arrives: the
    end LSN still reaches bronze (it used to stay behind until the next transaction)."""
    if kind == "plain":  # batches of 3, landed as the ingest loop does
        run_like_the_ingest_loop(path, [RELATION, *plain_transaction(100, range(3))])
        assert read_progress(path, "slot") == Progress(108, (100, 2))
    else:  # blocks of 4 (the last 3 records in memory) read back: an aborted subxact
        ingest(path, streamed_transaction(900, 500), batch_rows=3, spill_rows=4)
        assert read_progress(path, "slot") == Progress(508, (500, 11))


def test_transactions_without_rows_do_not_each_get_a_commit(path):
    """Postgres 13/14 send Begin/Commit for transactions that changed no published table:
    after a batch filled up at a transaction's end, they must not each commit progress
    (the slot then advances with the idle confirm)."""
    empty = [message for lsn in range(200, 220) for message in plain_transaction(lsn, range(0))]
    run_like_the_ingest_loop(path, [RELATION, *plain_transaction(100, range(3)), *empty])
    from deltalake import DeltaTable

    assert DeltaTable(str(path)).version() <= 2  # create, the rows, their end LSN
    assert read_progress(path, "slot").end_lsn >= 108


def test_a_streamed_transaction_older_than_bronze_is_skipped_without_reading_it_back(
        path, monkeypatch):
    from pipelines.ingest import bronze_files

    messages = [*streamed_without_aborts(900, 500, range(12)), RELATION,
                *plain_transaction(600, range(2))]
    ingest(path, messages)

    def no_read_back(self):
        raise AssertionError("a transaction bronze holds whole was read back")
    monkeypatch.setattr(bronze_files.PendingFile, "read", no_read_back)
    report = ingest(path, messages)  # the server resends both
    assert report.changes == 0 and len(bronze(path)) == 14
    assert not set(path.glob("*.parquet")) - {path / a for a in _added_files(path)}


def _added_files(path) -> list[str]:
    from deltalake import DeltaTable

    return [uri.rsplit("/", 1)[-1] for uri in DeltaTable(str(path)).file_uris()]


def test_where_files_cannot_be_patched_a_stream_is_read_back_and_landed(path, monkeypatch):
    """E.g. a Databricks volume (no seeking writes): same rows, no files left behind."""
    from pipelines.ingest import bronze_writer

    monkeypatch.setattr(bronze_writer, "can_patch_in_place", lambda directory: False)
    ingest(path, streamed_without_aborts(900, 500, range(12)))  # spill_rows=5: 3 files
    assert bronze(path) == [(500, i, "insert", str(i)) for i in range(12)]
    assert set(path.glob("*.parquet")) == {path / name for name in _added_files(path)}
