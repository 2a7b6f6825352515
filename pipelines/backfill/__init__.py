"""Backfill: DBLog watermark snapshots of the rows that existed before the slot.

Each table is read in keyset chunks on its key while the ingest keeps streaming. A chunk
sits between a low and a high watermark (logical messages in the WAL), so silver can
tell which chunk rows a concurrent change has made stale. See docs/backfill.md.
"""
