from tests.support.cli import lakehouse


def test_bad_config_exits_2_with_message_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("source: {dsn: x}\nengine: flink\n")
    result = lakehouse(bad, "status", check=False)
    assert result.returncode == 2
    assert ("engine: got 'flink', expected one of local, spark, connect, databricks"
            in result.stderr)
    assert "Traceback" not in result.stderr


def test_unreachable_source_exits_3(tmp_path):
    config = tmp_path / "c.yml"
    config.write_text("source: {dsn: 'host=127.0.0.1 port=1 user=x dbname=x'}\n")
    result = lakehouse(config, "status", check=False)
    assert result.returncode == 3, result.stderr
    assert "source: unreachable (cannot connect to the source database" in result.stdout
    assert "bronze: empty (run lakehouse ingest)" in result.stdout  # the lake side still shows


def test_help_explains_every_verb():
    result = lakehouse(None, "--help", check=False)
    assert result.returncode == 0
    for verb in ("setup", "ingest", "backfill", "silver", "gold", "verify", "run", "status",
                 "demo"):
        assert verb in result.stdout
    assert "Exit codes" in result.stdout


def test_an_engine_whose_extra_is_missing_stops_before_any_work_and_names_the_extra(
        tmp_path, monkeypatch, capsys):
    import importlib.util

    from pipelines import extras
    from pipelines.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("pysail", "delta") else real(name, *a))
    for engine, extra in (("local", "local"), ("spark", "spark")):
        config = tmp_path / f"{engine}.yml"
        config.write_text(f"source: {{dsn: 'host=127.0.0.1 port=1'}}\nlake: {{path: lake}}\n"
                          f"engine: {engine}\n")
        assert main(["--config", str(config), "silver"]) == 2
        assert f"is not installed: pip install 'lakehouse-cdc[{extra}]'" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()
