"""Ingest: stream pgoutput changes from a replication slot into bronze, no Spark involved."""
