"""Project exceptions; each carries the CLI exit code of docs/architecture.md's contract."""

from __future__ import annotations


class LakehouseError(Exception):
    """Base class: a problem the user can act on, reported without a traceback."""

    exit_code = 2


class ConfigError(LakehouseError):
    """Bad configuration or usage (exit 2)."""

    exit_code = 2


class SourceError(LakehouseError):
    """The source database is unreachable or not set up for replication (exit 3)."""

    exit_code = 3


class StorageError(LakehouseError):
    """The lake's store is unreachable or refused a request (exit 5)."""

    exit_code = 5


class DataError(LakehouseError):
    """Input that cannot be processed safely, e.g. a corrupt message (exit 4)."""

    exit_code = 4
