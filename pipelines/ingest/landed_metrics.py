"""The ingest's counters on its metrics endpoint: what it committed to bronze."""

from __future__ import annotations

from pipelines.metrics import counter

LANDED_CHANGES = counter(
    "lakehouse_ingest_landed_changes", "Changes committed to bronze by the ingest.")
LANDED_BYTES = counter(
    "lakehouse_ingest_landed_bytes", "Bytes of the bronze rows the ingest committed, as "
    "Arrow holds them in memory (the ZSTD Parquet files are smaller).")
INGEST = (LANDED_CHANGES, LANDED_BYTES)
