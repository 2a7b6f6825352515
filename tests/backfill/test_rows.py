"""Every pre-existing row lands once, with pgoutput's text values and type metadata."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from pipelines.ingest.pgoutput import Insert, Relation, decode_message
from pipelines.source.text_format import with_text_format
from tests.support.backfill import backfill, select_text, setup_source, snapshot_rows, states
from tests.support.config import make_config

pytestmark = pytest.mark.pg_versions

TRICKY = ["", " ", "a b", " leading", "trailing ", "O'Brien", '"quoted"', "comma,here",
          "new\nline", "cr\r\nlf", "tab\there", "back\\slash", "Ünïcödé ✓", "日本語", "ABC",
          "abc", "Abc", "NULL", "\\N", "emoji 🎉", "''", ",", '"', "\\."]

KEYS_DDL = """
CREATE TABLE members (region text, seq int, note text, PRIMARY KEY (seq, region));
CREATE TABLE tokens (id uuid PRIMARY KEY, n int);
CREATE TABLE words (k text PRIMARY KEY, v text);
CREATE TABLE empty (id int PRIMARY KEY);
INSERT INTO tokens SELECT gen_random_uuid(), i FROM generate_series(1, 300) i;
INSERT INTO words SELECT 'w' || lpad(i::text, 3, '0'), CASE WHEN i % 5 = 0 THEN NULL
    WHEN i % 7 = 0 THEN '' ELSE 'value ' || i END FROM generate_series(1, 100) i;
"""
KEY_TABLES = ["public.members", "public.tokens", "public.words", "public.empty"]


@pytest.fixture
def keyed(source_dsn, lake):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(KEYS_DDL)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO members VALUES (%s, %s, %s)",
                            [(region, seq, f"{region}|{seq}" if seq % 3 else None)
                             for region in TRICKY for seq in range(1, 13)])
            cur.executemany("INSERT INTO words VALUES (%s, %s)", [(t, t) for t in TRICKY])
    setup_source(source_dsn, "", KEY_TABLES)
    return make_config(source_dsn, lake, KEY_TABLES)


def test_composite_uuid_and_text_keys_land_every_row_exactly_once(keyed):
    results = backfill(keyed, chunk_size=11, parallel=2)
    assert {r.table: r.status for r in results} == dict.fromkeys(KEY_TABLES, "done")
    dsn = keyed.source.dsn
    for table, order in [("public.members", "seq, region"), ("public.tokens", "id"),
                         ("public.words", "k")]:
        rows = snapshot_rows(keyed, table)
        expected = select_text(dsn, f"SELECT * FROM {table}")
        assert Counter(tuple(r["values"]) for r in rows) == Counter(expected), table
        # col::text agrees with the output function for these types
        cast = select_text(dsn, "SELECT " + ", ".join(
            f"{c}::text" for c in rows[0]["columns"]) + f" FROM {table}")
        assert sorted(map(tuple, (r["values"] for r in rows)), key=repr) == sorted(cast, key=repr)
        keys = Counter(tuple(r["values"][r["columns"].index(k)] for k in r["key_columns"])
                       for r in rows)
        assert set(keys.values()) == {1}, f"{table}: a key landed twice"
    assert snapshot_rows(keyed, "public.empty") == []


def test_keys_scattered_on_disk_are_read_by_key_range(keyed, caplog):
    """After ANALYZE a random uuid key shows ~0 correlation with the heap: its chunks
    are read by key range, rows in no particular order, and still cover consecutive key
    ranges, every row once; 300 rows in chunks of 12 end with an empty chunk. A
    composite key keeps key-order reads (its row comparisons are estimated badly)."""
    with psycopg.connect(keyed.source.dsn, autocommit=True) as conn:
        conn.execute("ANALYZE tokens, members")
    with caplog.at_level("INFO", logger="pipelines.backfill.job"):
        backfill(keyed, "public.tokens", "public.members", chunk_size=12)
    assert "public.tokens: chunks are read by key range" in caplog.text
    assert "public.members: chunks are read in key order" in caplog.text
    for table, key in [("public.tokens", ("id",)), ("public.members", ("seq", "region"))]:
        rows = sorted(snapshot_rows(keyed, table), key=lambda r: (r["chunk_id"], r["row_index"]))
        assert Counter(tuple(r["values"]) for r in rows) == Counter(
            select_text(keyed.source.dsn, f"SELECT * FROM {table}")), table
        keys = [tuple(r["values"][r["columns"].index(k)] for k in key) for r in rows]
        chunk_of = dict(zip(keys, (r["chunk_id"] for r in rows)))
        assert len(chunk_of) == len(rows), f"{table}: a key landed twice"
        ordered = select_text(keyed.source.dsn,
                              f"SELECT {', '.join(key)} FROM {table} ORDER BY {', '.join(key)}")
        chunks = [chunk_of[k] for k in ordered]
        assert chunks == sorted(chunks), f"{table}: chunks are not consecutive key ranges"
        assert set(Counter(chunks).values()) == {12}, table  # 300 and 288 rows
        # key-order reads land rows in key order; range reads (here) do not
        assert (keys == ordered) == (table == "public.members"), table


def test_type_metadata_and_chunk_bookkeeping(keyed):
    backfill(keyed, "public.members", "public.tokens", chunk_size=11)
    members = snapshot_rows(keyed, "public.members")
    first = members[0]
    assert first["columns"] == ["region", "seq", "note"]
    assert first["type_names"] == ["text", "int4", "text"]
    assert first["type_oids"] == [25, 23, 25]
    assert first["type_mods"] == [-1, -1, -1]
    assert first["key_columns"] == ["region", "seq"]  # table order, not the key's (seq, region)
    assert first["read_at"] is not None
    tokens = snapshot_rows(keyed, "public.tokens")
    assert tokens[0]["type_names"] == ["uuid", "int4"] and tokens[0]["type_oids"] == [2950, 23]

    by_table = {s.table_name: s for s in states(keyed)}
    assert by_table["public.members"].cursor_columns == ("seq", "region")
    assert by_table["public.members"].rows_done == len(TRICKY) * 12
    for table, rows in [("public.members", members), ("public.tokens", tokens)]:
        state = by_table[table]
        assert {r["backfill_id"] for r in rows} == {state.backfill_id}
        chunks: dict[int, list[int]] = {}
        for r in rows:
            chunks.setdefault(r["chunk_id"], []).append(r["row_index"])
        assert all(sorted(ix) == list(range(len(ix))) for ix in chunks.values())
        assert all(len(ix) <= 11 for ix in chunks.values())
        assert len(chunks) <= state.chunks_done  # plus a last empty chunk, if any


TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE typed (
    id int PRIMARY KEY, gone int, flag bool, code char(4), addr inet, net cidr,
    amount numeric(12,3), ratio float8, f4 real, at timestamptz, at_local timestamp,
    day date, clock time, span interval, raw bytea, doc jsonb, js json, tags text[],
    nums int[], feeling mood, label varchar(10), p posint, mac macaddr, bits bit(4),
    twice int GENERATED ALWAYS AS (id * 2) STORED, body text);
ALTER TABLE typed DROP COLUMN gone;
"""
TYPED_ROWS = """
INSERT INTO typed (id, flag, code, addr, net, amount, ratio, f4, at, at_local, day, clock, span,
                   raw, doc, js, tags, nums, feeling, label, p, mac, bits, body) VALUES
 (1, true, 'ab', '10.0.0.1', '10.0.0.0/8', 1.5, 0.1, 1.1, '2026-01-05 08:00:00.123+02',
  '2026-01-05 08:00', '2026-01-05', '12:34:56.789', '1 day 02:03:04', '\\x00ff0a',
  '{"b": 1, "a": [1, "x"]}', '{"b":1,  "a":2}', '{"a b", "", NULL, "q\\"q"}', '{1,2,3}',
  'happy', 'héllo', 7, '08:00:2b:01:02:03', '1010', repeat('toasted text ', 500)),
 (2, false, '', '::1', '::/0', -0.000, 'NaN', '-Infinity', 'infinity', '-infinity', 'epoch',
  '00:00', 'P-1Y-2M-3DT-4H-5M-6S', '', '[]', 'null', '{}', '{}', 'sad', '', 1, '00:00:00:00:00:00',
  '0000', ''),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 'wxyz', '192.168.1.1/24', '192.168.0.0/16', 123456789.123, 1e-7, 3.4e38,
  '1999-12-31 23:59:59.999999+00', '0001-01-01 00:00', '2000-02-29', '23:59:59.999999',
  '1.5 seconds', '\\x', '{"nested": {"k": "v\\n"}}', '"text"', '{{"a"},{"b"}}',
  '{{1,2},{3,4}}', 'happy', 'ten chars!', 2147483647, 'ff:ff:ff:ff:ff:ff', '1111',
  E'line\\nbreak, "quotes" and \\\\ backslash');
"""


def test_values_and_types_are_exactly_what_pgoutput_sends(source_dsn, lake):
    """Rows inserted after the slot exist twice: as pgoutput Inserts and in the backfill."""
    setup_source(source_dsn, TYPES_DDL, ["public.typed"])
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(TYPED_ROWS)
    config = make_config(source_dsn, lake, ["public.typed"])
    backfill(config, chunk_size=3)

    with psycopg.connect(with_text_format(source_dsn), autocommit=True) as conn:
        messages = [decode_message(d) for (d,) in conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('lakehouse', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'lakehouse')")]
    relation = next(m for m in messages if isinstance(m, Relation))
    sent = {m.new[0]: m.new for m in messages if isinstance(m, Insert)}
    rows = {r["values"][0]: r for r in snapshot_rows(config)}
    assert sorted(rows) == sorted(sent) == ["1", "2", "3", "4"]
    for key, row in rows.items():
        expected = tuple(None if not isinstance(v, str) else v for v in sent[key])
        assert tuple(row["values"]) == expected, key
        assert row["columns"] == [c.name for c in relation.columns]  # no gone, no twice
        assert row["type_oids"] == [c.type_oid for c in relation.columns]
        assert row["type_mods"] == [c.type_modifier for c in relation.columns]
        assert row["key_columns"] == [c.name for c in relation.columns if c.is_key]
    first = rows["1"]
    types = dict(zip(first["columns"], first["type_names"]))
    assert types["tags"] == "_text" and types["feeling"] == "mood" and types["p"] == "posint"
    assert types["code"] == "bpchar" and dict(zip(first["columns"], first["type_mods"]))["code"] == 8
    values = dict(zip(first["columns"], first["values"]))
    assert values["flag"] == "t" and values["code"] == "ab  "  # not true / 'ab' as ::text gives
    assert values["addr"] == "10.0.0.1" and values["at"] == "2026-01-05 06:00:00.123+00"
    assert values["span"] == "P1DT2H3M4S" and len(values["body"]) == 6500
    assert dict(zip(rows["2"]["columns"], rows["2"]["values"]))["code"] == "    "


@pytest.mark.parametrize("layout", ["key-order", "scattered"])
def test_a_publication_row_filter_and_column_list_shape_the_chunks(source_dsn, lake, caplog,
                                                                   layout):
    """The backfill reads what the publication sends: its columns, its rows. Chunks count
    only matching rows, in key order and by key range alike (200 of 300 rows match:
    chunks of 20 end with an empty one)."""
    order = "md5(i::text)" if layout == "scattered" else "i"
    setup_source(source_dsn, "CREATE TABLE picks (id int PRIMARY KEY, v text, secret text); "
                 "INSERT INTO picks SELECT i, 'v' || i, 's' || i FROM generate_series(1, 300) i "
                 f"ORDER BY {order}; ANALYZE picks;", ["public.picks"])
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION lakehouse SET TABLE public.picks (id, v) "
                     "WHERE (id % 3 <> 0)")
    config = make_config(source_dsn, lake, ["public.picks"])
    with caplog.at_level("INFO", logger="pipelines.backfill.job"):
        backfill(config, chunk_size=20)
    assert ("chunks are read by key range" in caplog.text) == (layout == "scattered")
    rows = snapshot_rows(config)
    assert {r["columns"] == ["id", "v"] for r in rows} == {True}
    assert Counter(tuple(r["values"]) for r in rows) == Counter(
        select_text(source_dsn, "SELECT id, v FROM picks WHERE id % 3 <> 0"))
    assert set(Counter(r["chunk_id"] for r in rows).values()) == {20}
