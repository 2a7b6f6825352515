"""Lake layout: every Delta table's path derives from the lake root (DESIGN.md, Interfaces)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc


@dataclass(frozen=True)
class LakeLayout:
    """Paths of the bronze, silver, gold and pipeline-state tables under one root."""

    root: Path

    @property
    def bronze_changes(self) -> Path:
        return self.root / "bronze" / "changes"

    @property
    def bronze_snapshots(self) -> Path:
        return self.root / "bronze" / "snapshots"

    def silver(self, schema: str, table: str) -> Path:
        return self.root / "silver" / schema / table

    def gold(self, report: str) -> Path:
        return self.root / "gold" / report

    def state(self, name: str) -> Path:
        """Pipeline bookkeeping tables (backfill cursors, silver progress)."""
        return self.root / "_state" / name


def read_delta(path: Path | str, columns: list[str] | None = None,
               filter: "pc.Expression | None" = None) -> "pa.Table":
    """A Delta table (or some columns of it) as Arrow, read with delta-rs.

    Not DeltaTable.to_pyarrow_table(): with deltalake 1.6 its threaded scan now and then
    aborts the interpreter at exit ("terminate called without an active exception").
    """
    from deltalake import DeltaTable

    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    return dataset.to_table(columns=columns, filter=filter, use_threads=False)
