"""The shape of a source table as bronze rows describe it (no call back to Postgres)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceColumn:
    """One source column: name, Postgres type (pg_type.typname and atttypmod), key flag."""

    name: str
    type_name: str  # int4, numeric, _text (array of text), an enum's own name, ...
    type_mod: int  # -1 when the type has no modifier
    is_key: bool


@dataclass(frozen=True)
class TableShape:
    """A source table's columns in table order."""

    schema: str
    table: str
    columns: tuple[SourceColumn, ...]

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_key)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"
