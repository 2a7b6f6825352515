"""Lake layout: every Delta table's path derives from the lake root
(docs/architecture.md, Interfaces)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

# How far back the Delta log of the tables the pipeline commits to is kept. On a local
# file system every Delta read and commit lists the whole _delta_log directory (there is
# no listing from an offset): measured with delta-rs 1.6, an append took 4.7 ms with a
# short log and 415 ms with 20,000 more entries; a Sail read 14 ms and 279 ms. The ingest
# commits up to once a second, silver every run: under Delta's default of 30 days every
# commit would slow down by seconds within a day. Log files older than this and older
# than the latest checkpoint are deleted (delta-rs tables: at each checkpoint, every 100
# commits; Sail's: by trim_log). Time travel reaches back this far; no reader of the
# pipeline needs older versions (silver reads bronze by position).
LOG_RETENTION = {"delta.logRetentionDuration": "interval 10 minutes"}
TRIM_LOG_ENTRIES = 200  # trim_log works only on a log with more entries than this


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


def with_log_retention(table: "DeltaTable",
                       metadata: dict[str, str] | None = None) -> "DeltaTable":
    """The table, its log retention set to LOG_RETENTION (one metadata commit if it was
    not: a lake created before it was; `metadata` goes into that commit's info). Only a
    table's sole writer may do this: the metadata commit fails a concurrent append."""
    from deltalake import CommitProperties

    configuration = table.metadata().configuration
    if any(configuration.get(key) != value for key, value in LOG_RETENTION.items()):
        table.alter.set_table_properties(
            LOG_RETENTION, commit_properties=CommitProperties(custom_metadata=metadata))
    return table


def trim_log(path: Path) -> bool:
    """Delete the expired log files of a table another engine commits to (Sail writes
    checkpoints but never deletes a log file), once its log has more than
    TRIM_LOG_ENTRIES entries; True if it did. Called by the table's writer after a run.

    delta-rs deletes the expired commits and checkpoints; the checksum files beside each
    commit (Sail's `N.crc`, Hadoop's `.N.json.crc`) go too, once their commit is gone:
    they describe nothing any more. Best effort: a failure is logged, the run goes on
    (the log is only longer than it should be).
    """
    from deltalake import DeltaTable

    log = path / "_delta_log"
    try:
        if len(os.listdir(log)) <= TRIM_LOG_ENTRIES:
            return False
        with_log_retention(DeltaTable(str(path))).cleanup_metadata()
        names = os.listdir(log)
        commits = [_version(name) for name in names if name.endswith(".json")]
        oldest = min((v for v in commits if v is not None), default=0)
        for name in names:
            version = _version(name)
            if name.endswith(".crc") and version is not None and version < oldest:
                (log / name).unlink(missing_ok=True)
        return True
    except Exception:  # noqa: BLE001 - trimming must never fail the run that committed
        logging.getLogger(__name__).warning("could not trim the Delta log of %s", path,
                                            exc_info=True)
        return False


def _version(name: str) -> int | None:
    """The commit version a log file belongs to (00000000000000000012.json,
    00000000000000000012.crc, .00000000000000000012.json.crc); None for others."""
    digits = name.lstrip(".").split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def read_delta(path: Path | str, columns: list[str] | None = None,
               filter: "pc.Expression | None" = None) -> "pa.Table":
    """A Delta table (or some columns of it) as Arrow.

    delta-rs lists the table's current files; plain pyarrow reads them. delta-rs's own
    scans (to_pyarrow_table, and to_pyarrow_dataset whose files pyarrow reads through
    delta-rs's filesystem) now and then abort the interpreter at exit with deltalake 1.6
    ("terminate called without an active exception"): measured 1 in 60 runs, against
    0 in 150 this way. Partitioned tables and tables with deletion vectors (neither of
    which this project writes) still need delta-rs's scan.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    if table.metadata().partition_columns or "deletionVectors" in (
            table.protocol().reader_features or []):
        dataset = table.to_pyarrow_dataset()
    else:
        dataset = ds.dataset(table.file_uris(), format="parquet", schema=pa.schema(table.schema()))
    return dataset.to_table(columns=columns, filter=filter, use_threads=False)
