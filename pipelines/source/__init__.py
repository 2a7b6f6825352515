"""The Postgres side: connections, replication objects, table metadata."""
