"""The wheel as clusters and laptops install it, in fresh Python 3.12 environments.

- Its own requirements hold no engine, embedded server or test tool: those are extras.
- With no extra, the verbs that need no Spark run, and the others say which extra to add.
- In an environment that already holds PySpark and delta-spark of the pinned line with a
  runtime image's older pandas, pyarrow and numpy (as a Databricks Runtime 17.3 LTS
  cluster does), installing the wheel changes none of them, and that environment alone
  runs setup, backfill, ingest, silver on classic Spark, and verify.

Every `lakehouse` runs from a directory outside the checkout, so only the installed wheel
can be imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from pipelines.demo.run import DEMO_TABLES
from tests.support.demo import change_after_snapshot, seeded

# one worker builds the wheel and its environments (module fixtures) for every test here
pytestmark = [pytest.mark.install, pytest.mark.postgres, pytest.mark.xdist_group("install")]
ROOT = Path(__file__).resolve().parents[2]
CORE = {"deltalake", "obstore", "psycopg", "pyarrow", "numpy", "pyyaml", "rich",
        "prometheus-client", "python-json-logger", "sqlglot"}


@pytest.fixture(scope="module")
def runtime() -> dict[str, str]:
    """What a runtime image holds before the wheel arrives: the pinned Spark line (this
    environment's own), and older data libraries."""
    return {"pyspark": version("pyspark"), "delta-spark": version("delta-spark"),
            "pandas": "2.2.3", "pyarrow": "19.0.1", "numpy": "2.1.3"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(out), str(ROOT)], check=True, capture_output=True, cwd=out)
    [built] = out.glob("lakehouse_cdc-*.whl")
    return built


@pytest.fixture(scope="module")
def python312() -> str:
    found = subprocess.run([str(ROOT / "scripts" / "find-python.sh"), "3.12"],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


def new_venv(python: str, path: Path, *requirements: str) -> Path:
    """A fresh virtual environment with `requirements` installed; returns its bin dir."""
    subprocess.run([python, "-m", "venv", str(path)], check=True)
    if requirements:
        pip(path / "bin", "install", *requirements)
    return path / "bin"


def pip(bin_dir: Path, *args: str) -> str:
    result = subprocess.run([str(bin_dir / "pip"), "--disable-pip-version-check", *args],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def installed(bin_dir: Path) -> dict[str, str]:
    return {p["name"].lower().replace("_", "-"): p["version"]
            for p in json.loads(pip(bin_dir, "list", "--format", "json"))}


def lakehouse(bin_dir: Path, config: Path, *args: str,
              expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([str(bin_dir / "lakehouse"), "--config", str(config), *args],
                            capture_output=True, text=True, timeout=900, cwd=config.parent)
    assert result.returncode == expect, f"lakehouse {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result


def write_config(path: Path, dsn: str, engine: str) -> Path:
    path.write_text(yaml.safe_dump({
        "source": {"dsn": dsn, "tables": DEMO_TABLES}, "lake": {"path": "lake"},
        "engine": engine,
        # A job cluster's driver alone, with the engine's defaults otherwise.
        "spark": {"master": "local[2]"}}))
    return path


def test_the_wheel_requires_no_engine_server_or_test_tool(wheel):
    with zipfile.ZipFile(wheel) as whl:
        [name] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(whl.read(name).decode())
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist")]

    def names(extra: str | None) -> set[str]:
        return {r.name.lower() for r in requires
                if (r.marker is None and extra is None)
                or (r.marker is not None and extra is not None
                    and r.marker.evaluate({"extra": extra, "python_version": "3.12"}))}

    assert names(None) == CORE
    assert {"pysail", "pyspark", "pgserver"} <= names("local")
    assert {"pyspark", "delta-spark"} <= names("spark")
    assert {"chispa", "pytest"} <= names("test")
    assert SpecifierSet(metadata["Requires-Python"]) == SpecifierSet(">=3.11,<3.14")


def test_without_extras_the_spark_free_verbs_run_and_the_others_name_their_extra(
        wheel, python312, tmp_path, source_dsn):
    bin_dir = new_venv(python312, tmp_path / "venv", str(wheel))
    assert "pyspark" not in installed(bin_dir)
    seeded(source_dsn)
    config = write_config(tmp_path / "lakehouse.yml", source_dsn, "local")

    lakehouse(bin_dir, config, "--help")
    lakehouse(bin_dir, config, "setup")
    lakehouse(bin_dir, config, "backfill")
    lakehouse(bin_dir, config, "ingest", "--until-idle", "1")
    lakehouse(bin_dir, config, "status")

    local = lakehouse(bin_dir, config, "silver", expect=2)
    assert "PySpark is not installed: pip install 'lakehouse-cdc[local]'" in local.stderr
    spark = lakehouse(bin_dir, write_config(tmp_path / "spark.yml", source_dsn, "spark"),
                      "verify", expect=2)
    assert "PySpark is not installed: pip install 'lakehouse-cdc[spark]'" in spark.stderr
    demo = subprocess.run([str(bin_dir / "lakehouse"), "demo", "--workdir", str(tmp_path / "d")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert demo.returncode == 2
    assert "pip install 'lakehouse-cdc[local]'" in demo.stderr
    assert "Traceback" not in local.stderr + spark.stderr + demo.stderr


def test_a_cluster_like_python_312_environment_runs_the_pipeline_on_its_own_spark(
        wheel, python312, runtime, tmp_path, source_dsn):
    bin_dir = new_venv(python312, tmp_path / "venv",
                       *(f"{name}=={v}" for name, v in runtime.items()))
    before = installed(bin_dir)

    pip(bin_dir, "install", str(wheel))

    after = installed(bin_dir)
    assert {name: after[name] for name in runtime} == runtime
    assert {name: v for name, v in before.items() if after.get(name) != v} == {}
    assert "pysail" not in after and "pgserver" not in after and "pytest" not in after
    seeded(source_dsn)
    config = write_config(tmp_path / "lakehouse.yml", source_dsn, "spark")
    lakehouse(bin_dir, config, "setup")
    lakehouse(bin_dir, config, "backfill")
    change_after_snapshot(source_dsn)
    lakehouse(bin_dir, config, "ingest", "--until-idle", "2")
    silver = lakehouse(bin_dir, config, "silver")
    verified = lakehouse(bin_dir, config, "verify")

    assert f"classic Spark {runtime['pyspark']}" in silver.stderr
    for table in DEMO_TABLES:
        assert f"{table}: equal" in verified.stdout
