"""Postgres change data capture into a Delta Lake lakehouse (bronze, silver, gold)."""
