"""Where silver, history and gold tables live: at lake paths (the config's default), or
by Unity Catalog names with engine databricks. The tests' catalog is the session's own
(`sail` on Sail, `spark_catalog` on classic Spark); a workspace's would be Unity
Catalog's. A test marked BOTH_LAYOUTS runs once with each through the `layout` fixture."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

BOTH_LAYOUTS = pytest.mark.parametrize("layout", ["lake", "unity_catalog"], indirect=True)


def unity_catalog_settings(catalog: str, engine: str) -> dict[str, Any]:
    """Config settings for engine databricks with fresh schemas in `catalog`. The gold
    schema's name needs quoting on Sail (and in Unity Catalog); classic Spark's session
    catalog refuses names other than letters, digits and _ (tests/test_delta_engines.py)."""
    suffix = uuid.uuid4().hex[:8]
    gold = f"gold-{suffix}" if engine == "sail" else f"gold_{suffix}"
    return {"engine": "databricks",
            "databricks": {"catalog": catalog, "silver_schema": f"silver_{suffix}",
                           "gold_schema": gold, "history_schema": f"history_{suffix}"}}
