"""The Databricks bundle: valid against the published JSON Schema, and every job task
calls a real CLI verb with arguments the CLI accepts (no workspace is reachable here)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from pipelines.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT.parent / "shared" / "schemas" / "databricks-bundle.schema.json"
BUNDLE_FILES = [ROOT / "databricks.yml", *sorted((ROOT / "resources").glob("*.yml"))]


def python_patterns(node):
    """The schema's Go regexes use \\p{L} / \\p{N}; Python's re spells them differently."""
    if isinstance(node, dict):
        return {k: (v.replace(r"[\p{L}\p{N}]", r"[^\W_]").replace(r"\p{L}", r"[^\W\d_]")
                    if k == "pattern" and isinstance(v, str) else python_patterns(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [python_patterns(v) for v in node]
    return node


@pytest.fixture(scope="module")
def validator():
    schema = python_patterns(json.loads(SCHEMA.read_text()))
    return jsonschema.validators.validator_for(schema)(schema)


@pytest.mark.parametrize("path", BUNDLE_FILES, ids=lambda p: p.name)
def test_bundle_file_matches_the_schema(validator, path):
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}"
              for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def test_schema_check_can_fail(validator):
    broken = {"resources": {"jobs": {"x": {"tasks": "not a list", "max_concurrent_runs": "x"}}}}
    assert list(validator.iter_errors(broken))


def test_bundle_shape_follows_the_default_python_template():
    bundle = yaml.safe_load((ROOT / "databricks.yml").read_text())
    assert bundle["include"] == ["resources/*.yml"]
    assert bundle["targets"]["dev"]["mode"] == "development"
    assert bundle["targets"]["dev"]["default"] is True
    assert bundle["targets"]["prod"]["mode"] == "production"
    assert {"catalog", "silver_schema", "gold_schema", "lake_path", "secret_scope", "slot",
            "publication"} <= set(bundle["variables"])
    dev = bundle["targets"]["dev"]["variables"]
    assert dev["slot"] != bundle["variables"]["slot"]["default"]  # dev never takes prod's slot
    assert dev["lake_path"] != bundle["variables"]["lake_path"]["default"]


def job_tasks():
    for path in BUNDLE_FILES[1:]:
        for name, job in yaml.safe_load(path.read_text())["resources"]["jobs"].items():
            for task in job["tasks"]:
                yield pytest.param(job, task, id=f"{name}.{task['task_key']}")


def substitute(argument: str) -> str:
    """Bundle variables and job parameters as the workspace would fill them in."""
    argument = re.sub(r"\{\{job\.parameters\.(\w+)\}\}", lambda m: "7", argument)
    return re.sub(r"\$\{[\w.]+\}", "x", argument)


@pytest.mark.parametrize("job, task", list(job_tasks()))
def test_task_entry_point_and_parameters_exist_in_the_cli(job, task):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wheel = task["python_wheel_task"]
    assert wheel["package_name"] == project["name"].replace("-", "_")
    assert wheel["entry_point"] in project["scripts"]
    args = build_parser().parse_args([substitute(a) for a in wheel["parameters"]])
    assert args.verb in {"setup", "ingest", "backfill", "silver", "gold"}
    used = [a for t in job["tasks"] for a in t["python_wheel_task"]["parameters"]]
    for param in job.get("parameters", []):  # every job parameter reaches some task
        assert any(f"{{{{job.parameters.{param['name']}}}}}" in a for a in used)


def strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def test_no_secret_in_any_bundle_or_config_file():
    for path in [*BUNDLE_FILES, *(ROOT / "conf").glob("*.yml")]:
        for value in strings(yaml.safe_load(path.read_text())):
            assert not re.search(r"password\s*=", value, re.I), f"{path.name}: {value}"
    env = yaml.safe_load((ROOT / "resources" / "ingest.job.yml").read_text())
    cluster = env["resources"]["jobs"]["lakehouse_ingest"]["job_clusters"][0]["new_cluster"]
    assert cluster["spark_env_vars"]["LAKEHOUSE_SOURCE_DSN"].startswith("{{secrets/")
