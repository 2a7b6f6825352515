"""The tests' one config builder: a config document for a source and a lake, parsed as
`lakehouse` parses its file, or written to one for a `lakehouse` process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from pipelines.config import Config, parse_config

UNUSED_DSN = "host=unused"  # for tests that never connect to the source


def config_document(dsn: str = UNUSED_DSN, lake: Path | str = "lake",
                    tables: Sequence[str] | str = "*", *,
                    storage_options: Mapping[str, str] | None = None,
                    log_retention: str | None = None,
                    **sections: Any) -> dict[str, Any]:
    """The YAML document: source (dsn, tables), lake (path, storage options, log retention),
    and any other top-level key as given (`engine="spark"`, `ingest={"batch_seconds": 0.1}`,
    ...)."""
    lake_section: dict[str, Any] = {"path": str(lake)}
    if storage_options is not None:
        lake_section["storage_options"] = dict(storage_options)
    if log_retention is not None:
        lake_section["log_retention"] = log_retention
    return {"source": {"dsn": dsn, "tables": tables if isinstance(tables, str) else list(tables)},
            "lake": lake_section, **sections}


def make_config(dsn: str = UNUSED_DSN, lake: Path | str = "lake",
                tables: Sequence[str] | str = "*", *, base_dir: Path | None = None,
                **options: Any) -> Config:
    """The Config of `config_document(...)`; a relative lake path resolves against
    `base_dir` (the working directory by default); no environment variable applies."""
    return parse_config(config_document(dsn, lake, tables, **options), base_dir or Path.cwd(),
                        environ={})


def write_config(path: Path, dsn: str = UNUSED_DSN, lake: Path | str = "lake",
                 tables: Sequence[str] | str = "*", **options: Any) -> Path:
    """`config_document(...)` written to `path` for a `lakehouse --config` process."""
    path.write_text(yaml.safe_dump(config_document(dsn, lake, tables, **options)))
    return path
