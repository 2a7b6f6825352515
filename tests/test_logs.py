"""Log output as jobs and people get it: JSON lines for shippers, the engine quiet unless -v."""

from __future__ import annotations

import json
import os

from tests.support.cli import lakehouse

SECRET = "s3cr3t-value-123"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without a log setting an earlier in-process test left behind."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "LAKEHOUSE_LOG_FORMAT")}
    return {**env, **extra}


def test_json_logs_are_one_object_per_line_with_secrets_redacted(tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(f"source: {{dsn: x}}\nengine: {SECRET}\n")  # the error quotes it
    result = lakehouse(None, "--log-format", "json", "-v", "--config", str(config), "status",
                       env=clean_env(AWS_SECRET_ACCESS_KEY=SECRET), check=False)
    assert result.returncode == 2
    records = [json.loads(line) for line in result.stderr.splitlines()]  # every line
    [failed] = [r for r in records if r["message"] == "failed"]
    assert {"time", "level", "logger", "message", "exception"} <= failed.keys()
    assert failed["level"] == "DEBUG" and failed["logger"] == "lakehouse"
    assert "ConfigError: engine: got '***'" in failed["exception"]
    assert records[-1]["level"] == "ERROR"  # the verb's error is a record too
    assert records[-1]["message"].startswith("lakehouse status: error: engine: got '***'")
    assert SECRET not in json.dumps(records)

    same = lakehouse(config, "status", check=False,
                     env=clean_env(AWS_SECRET_ACCESS_KEY=SECRET, LAKEHOUSE_LOG_FORMAT="json"))
    assert same.returncode == 2  # the variable is the flag's default
    assert [json.loads(line)["level"] for line in same.stderr.splitlines()] == ["ERROR"]
    bad = lakehouse(config, "status", env=clean_env(LAKEHOUSE_LOG_FORMAT="xml"), check=False)
    assert bad.returncode == 2 and "$LAKEHOUSE_LOG_FORMAT: got 'xml'" in bad.stderr


def test_the_embedded_engine_logs_only_with_verbose(tmp_path):
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "one.sql").write_text("SELECT 1 AS one")  # reads no table
    config = tmp_path / "c.yml"
    config.write_text(f"source: {{dsn: 'host=nowhere'}}\nlake: {{path: '{tmp_path / 'lake'}'}}\n"
                      "gold: {reports: gold}\n")
    quiet = lakehouse(config, "gold", env=clean_env(), check=False)
    assert quiet.returncode == 0, quiet.stderr
    assert "pipelines.engine: local engine: Sail" in quiet.stderr  # the session did start
    assert "sail" not in quiet.stderr.replace("Sail Spark Connect server", "")
    verbose = lakehouse(None, "-v", "--config", str(config), "gold", env=clean_env(),
                        check=False)
    assert verbose.returncode == 0, verbose.stderr
    assert "INFO sail_python::spark::server] The Spark Connect server has stopped." in \
        verbose.stderr
