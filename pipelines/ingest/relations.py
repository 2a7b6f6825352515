"""Relation cache: what pgoutput's Relation and Type messages said about each table.

Data messages carry only a relation id; bronze rows need the table's name, columns,
types and key. pgoutput sends a Relation before a table's first change (and again after
its definition changes), and a Type message for each non-built-in column type, so the
cache never needs to ask Postgres.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from pipelines.errors import DataError
from pipelines.ingest.pgoutput import Relation, Type

log = logging.getLogger(__name__)

# pg_type.typname of the built-in types (OIDs are fixed below 16384); pgoutput sends a
# Type message for every other type. Checked against a live server in the tests.
BUILTIN_TYPE_NAMES: dict[int, str] = {
    16: "bool", 17: "bytea", 18: "char", 19: "name", 20: "int8", 21: "int2", 23: "int4",
    24: "regproc", 25: "text", 26: "oid", 27: "tid", 28: "xid", 29: "cid", 114: "json",
    142: "xml", 600: "point", 601: "lseg", 602: "path", 603: "box", 604: "polygon",
    628: "line", 650: "cidr", 700: "float4", 701: "float8", 718: "circle", 774: "macaddr8",
    790: "money", 829: "macaddr", 869: "inet", 1042: "bpchar", 1043: "varchar",
    1082: "date", 1083: "time", 1114: "timestamp", 1184: "timestamptz", 1186: "interval",
    1266: "timetz", 1560: "bit", 1562: "varbit", 1700: "numeric", 2205: "regclass",
    2950: "uuid", 3220: "pg_lsn", 3614: "tsvector", 3615: "tsquery", 3802: "jsonb",
    3904: "int4range", 3906: "numrange", 3908: "tsrange", 3910: "tstzrange",
    3912: "daterange", 3926: "int8range", 4072: "jsonpath", 5069: "xid8",
    # arrays
    143: "_xml", 199: "_json", 651: "_cidr", 775: "_macaddr8", 791: "_money",
    1000: "_bool", 1001: "_bytea", 1002: "_char", 1003: "_name", 1005: "_int2",
    1007: "_int4", 1009: "_text", 1014: "_bpchar", 1015: "_varchar", 1016: "_int8",
    1017: "_point", 1021: "_float4", 1022: "_float8", 1028: "_oid", 1040: "_macaddr",
    1041: "_inet", 1115: "_timestamp", 1182: "_date", 1183: "_time", 1185: "_timestamptz",
    1187: "_interval", 1231: "_numeric", 1270: "_timetz", 1561: "_bit", 1563: "_varbit",
    2951: "_uuid", 3643: "_tsvector", 3807: "_jsonb", 3905: "_int4range",
    3907: "_numrange", 3909: "_tsrange", 3911: "_tstzrange", 3913: "_daterange",
    3927: "_int8range",
}


@dataclass(frozen=True)
class TableInfo:
    """A published table's shape as bronze rows record it."""

    schema: str
    table: str
    columns: tuple[str, ...]
    type_names: tuple[str, ...]
    type_oids: tuple[int, ...]
    type_mods: tuple[int, ...]
    key_columns: tuple[str, ...]


class RelationCache:
    """relation id -> TableInfo, updated as Relation and Type messages arrive."""

    def __init__(self) -> None:
        self._tables: dict[int, TableInfo] = {}
        self._type_names: dict[int, str] = {}

    def add_type(self, message: Type) -> None:
        self._type_names[message.type_oid] = message.name

    def add_relation(self, message: Relation) -> TableInfo:
        info = TableInfo(
            schema=message.schema,
            table=message.name,
            columns=tuple(c.name for c in message.columns),
            type_names=tuple(self._type_name(c.type_oid) for c in message.columns),
            type_oids=tuple(c.type_oid for c in message.columns),
            type_mods=tuple(c.type_modifier for c in message.columns),
            key_columns=tuple(c.name for c in message.columns if c.is_key),
        )
        self._tables[message.relation_id] = info
        return info

    @property
    def by_id(self) -> Mapping[int, TableInfo]:
        """relation id -> TableInfo, read-only (the fast path looks tables up here)."""
        return self._tables

    def get(self, relation_id: int) -> TableInfo:
        try:
            return self._tables[relation_id]
        except KeyError:
            raise DataError(f"change for relation id {relation_id} arrived before its "
                            "Relation message; the stream is inconsistent") from None

    def _type_name(self, oid: int) -> str:
        name = self._type_names.get(oid) or BUILTIN_TYPE_NAMES.get(oid)
        if name is None:
            log.warning("type oid %d has no name (no Type message); recorded as unknown", oid)
            return f"unknown_oid_{oid}"
        return name
