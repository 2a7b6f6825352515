"""Lake layout: every Delta table's path derives from the lake root (DESIGN.md, Interfaces)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
