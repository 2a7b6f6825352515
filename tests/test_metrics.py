"""The metrics' parts: the backfill ETA, the config keys, port errors, serving, run's merge."""

from __future__ import annotations

import argparse
import io
import socket
import urllib.request

import pytest
from deltalake.exceptions import DeltaError
from prometheus_client import REGISTRY
from prometheus_client.samples import Sample
from rich.console import Console

from pipelines import metrics
from pipelines.backfill.bronze import SnapshotWriter
from pipelines.backfill.progress import BACKFILL, BackfillMetrics, ProgressDisplay, eta_seconds
from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.continuous import command as run_command
from pipelines.embedded_pg import free_port
from pipelines.errors import ConfigError
from pipelines.metrics import merge_samples, serve
from pipelines.metrics_collectors import serve_pipeline, watch_ingest
from tests.support.backfill import backfill, setup_source
from tests.support.cli import lakehouse
from tests.support.config import make_config


def config(**metrics):
    return make_config("host=x", metrics=metrics)


@pytest.mark.parametrize("done, estimate, rows, elapsed, expected", [
    (100, 1000, 100, 10.0, 90.0),  # 900 rows left at 10 rows/s
    (600, 1000, 200, 10.0, 20.0),  # rows before this run count as done, not in the rate
    (1200, 1000, 1200, 5.0, 0.0),  # past a stale estimate: nothing left
    (0, 1000, 0, 3.0, None),  # no rate before the first chunk
    (50, None, 50, 1.0, None),  # no estimate
    (50, 0, 50, 1.0, None),
])
def test_eta_is_the_rows_left_at_this_runs_rate(done, estimate, rows, elapsed, expected):
    assert eta_seconds(done, estimate, rows, elapsed) == expected


def test_backfill_metrics_per_table_and_eta_zero_once_done():
    """The metrics read the progress display's records: the bars' numbers."""
    now = [0.0]
    backfill = BackfillMetrics()
    display = ProgressDisplay(Console(file=io.StringIO()), tty=False, metrics=backfill,
                              clock=lambda: now[0])
    display.start("public.a", 1000, rows_before=100)
    display.start("public.b", None)
    display.advance("public.a", 200)
    now[0] = 4.0
    samples = {(s.name, s.labels["table"]): s.value
               for family in backfill.collect() for s in family.samples}
    assert samples == {("lakehouse_backfill_rows_done", "public.a"): 300,
                       ("lakehouse_backfill_rows_done", "public.b"): 0,
                       ("lakehouse_backfill_rows_estimate", "public.a"): 1000,
                       ("lakehouse_backfill_eta_seconds", "public.a"): 14.0}  # 700 at 50/s
    assert display.line("public.a") == ("public.a  300 / ~1,000 rows  30%  50 rows/s  "
                                        "ETA 14s")  # the same rate and ETA on screen
    display.finish("public.a", "done")
    display.finish("public.b", "interrupted")  # no ETA
    eta = {s.labels["table"]: s.value for family in backfill.collect()
           if family.name == "lakehouse_backfill_eta_seconds" for s in family.samples}
    assert eta == {"public.a": 0.0}


@pytest.mark.postgres
def test_a_backfill_reports_its_rows_to_the_metrics(source_dsn, tmp_path):
    setup_source(source_dsn, "CREATE TABLE counted (id int PRIMARY KEY); "
                 "INSERT INTO counted SELECT generate_series(1, 120); ANALYZE counted",
                 ["public.counted"])
    backfill(make_config(source_dsn, tmp_path / "lake", ["public.counted"]), chunk_size=50)
    samples = {s.name: s.value for family in BACKFILL.collect() for s in family.samples
               if s.labels["table"] == "public.counted"}
    assert samples == {"lakehouse_backfill_rows_done": 120,
                       "lakehouse_backfill_rows_estimate": 120,
                       "lakehouse_backfill_eta_seconds": 0.0}


@pytest.mark.postgres
def test_a_backfill_table_that_cannot_write_the_lake_counts_a_storage_error(
        source_dsn, tmp_path, monkeypatch):
    """Exit 4 like a data error, but counted as what it is: the lake's."""
    setup_source(source_dsn, "CREATE TABLE unwritten (id int PRIMARY KEY); "
                 "INSERT INTO unwritten SELECT generate_series(1, 10)", ["public.unwritten"])

    def fail(*args, **kwargs):
        raise DeltaError("the store refused the commit")

    monkeypatch.setattr(SnapshotWriter, "append", fail)
    before = {kind: errors(kind) for kind in ("storage", "data")}
    [result] = run_backfill(make_config(source_dsn, tmp_path / "lake", ["public.unwritten"]),
                            BackfillOptions())
    assert result.status == "failed" and result.error.exit_code == 4
    assert errors("storage") == before["storage"] + 1
    assert errors("data") == before["data"]


def errors(kind: str) -> float:
    return REGISTRY.get_sample_value("lakehouse_errors_total", {"kind": kind})


def test_metrics_port_keys_are_checked_and_absent_by_default():
    assert config().metrics.port is None and config().metrics.silver_port is None
    both = config(port=9187, silver_port=9188, address="127.0.0.1").metrics
    assert (both.port, both.silver_port) == (9187, 9188)
    for key in ("port", "silver_port"):
        for bad in (0, 70000, "9187x", True):
            with pytest.raises(ConfigError, match=f"metrics.{key}: got .*, expected a port "
                                                  "number from 1 to 65535"):
                config(**{key: bad})
    with pytest.raises(ConfigError, match="metrics.host: unknown setting"):
        config(host="x")


def test_no_port_no_endpoint_and_the_flag_overrides_the_key():
    assert serve(config(), None) is None
    with pytest.raises(ConfigError, match="--metrics-port: got 0, expected a port number"):
        serve(config(port=9187), 0)


def test_each_verb_takes_its_own_key_and_the_backfill_none():
    """An ingest on metrics.port, a silver loop on metrics.silver_port and a backfill
    beside them, all with one config: only the ingest's endpoint is on metrics.port."""
    with socket.socket() as taken:  # the running ingest's endpoint
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        shared = config(port=port, silver_port=port, address="127.0.0.1")
        assert serve(shared, None, key=None) is None  # backfill: no endpoint, no clash
        with pytest.raises(ConfigError, match="choose another with --metrics-port or "
                                              "metrics.silver_port"):
            serve(shared, None, key="silver_port")


def test_a_busy_port_is_a_config_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics port {port} on 127.0.0.1: .*in use"
                                              ".*--metrics-port or metrics.port"):
            serve(config(address="127.0.0.1"), port)


def test_port_errors_exit_2_before_any_work(tmp_path):
    path = tmp_path / "lakehouse.yml"
    path.write_text("source: {dsn: 'host=127.0.0.1 port=1 dbname=x'}\n")
    for args in (["ingest", "--metrics-port", "0"], ["silver", "--metrics-port", "9187"]):
        result = lakehouse(path, *args, check=False)
        assert result.returncode == 2, result.stderr
        assert "--metrics-port" in result.stderr and "Traceback" not in result.stderr


def test_no_endpoint_asked_no_port_for_the_ingest_child(monkeypatch):
    def no_port() -> int:
        raise AssertionError("a port chosen without an endpoint")

    monkeypatch.setattr("pipelines.metrics_collectors.free_port", no_port)
    assert serve_pipeline(config(), None) == []


def test_the_pipelines_endpoint_can_be_served_twice_in_one_process(tmp_path):
    """A second demo in one process (a notebook, tests): the same names registered again
    replace the first endpoint's collectors instead of raising 'Duplicated timeseries'."""
    refused = make_config("host=127.0.0.1 port=1 connect_timeout=1", tmp_path / "lake",
                          base_dir=tmp_path, metrics={"address": "127.0.0.1"})
    try:
        for up in (True, False):
            port = free_port()
            overrides = serve_pipeline(refused, port)
            assert overrides[0].startswith("metrics.port=") and overrides[0] != \
                f"metrics.port={port}"
            watch_ingest(lambda: up)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                        timeout=30) as reply:
                text = reply.read().decode()
            assert f"lakehouse_ingest_up {float(up)}" in text
    finally:  # the slot collector of a source that refuses: not for later tests
        for collector in set(metrics._SERVED.values()):
            REGISTRY.unregister(collector)
        metrics._SERVED.clear()


def test_run_starts_its_ingest_before_the_engine_and_stops_it_if_the_engine_fails(
        monkeypatch):
    events = []

    class Child:
        def __init__(self, config_path, overrides):
            events.append(("child", list(overrides)))

        def stop(self):
            events.append(("child stopped",))

    def no_engine(config):
        events.append(("engine",))
        raise ConfigError("no engine here")

    monkeypatch.setattr(run_command, "IngestProcess", Child)
    monkeypatch.setattr("pipelines.engine.get_spark", no_engine)
    args = argparse.Namespace(config="lakehouse.yml", overrides=["ingest.batch_rows=5"],
                              metrics_port=None)
    with pytest.raises(ConfigError, match="no engine here"):
        run_command._run(args, config())
    assert events == [("child", ["ingest.batch_rows=5"]), ("engine",), ("child stopped",)]


def test_run_sums_a_series_both_processes_count():
    ours = [Sample("lakehouse_errors_total", {"kind": "source"}, 1.0),
            Sample("lakehouse_errors_total", {"kind": "data"}, 0.0)]
    theirs = [Sample("lakehouse_errors_total", {"kind": "source"}, 2.0),
              Sample("lakehouse_errors_total", {"kind": "storage"}, 1.0)]
    merged = {s.labels["kind"]: s.value for s in merge_samples(ours, theirs)}
    assert merged == {"source": 3.0, "data": 0.0, "storage": 1.0}
