import threading

import pytest

from pipelines.errors import ConfigError
from pipelines.passes import MAX_FAILED_PASSES
from pipelines.silver.command import run_continuously
from pipelines.silver.job import SilverRunReport, TableReport


def test_continuous_runs_until_stopped_and_logs_a_stopped_table_once(caplog, capsys):
    stop = threading.Event()
    failed = TableReport("public.bad", error="column v changed type")
    reports = iter([SilverRunReport((5, 0), (failed,)), SilverRunReport(None),
                    SilverRunReport((6, 0), (failed, TableReport("public.items", inserts=2)))])

    def run_once():
        report = next(reports)
        if report.upto == (6, 0):
            stop.set()
        return report

    assert run_continuously(run_once, 0.01, stop) == 3
    assert [r.message for r in caplog.records].count(
        "silver public.bad stopped: column v changed type") == 1
    out = capsys.readouterr().out
    assert "public.items: 2 inserts, 0 updates, 0 deletes" in out
    assert "public.bad: STOPPED: column v changed type" in out


def test_a_run_that_raises_is_tried_again_and_a_run_that_keeps_raising_ends_the_loop(caplog):
    stop = threading.Event()
    outcomes = iter([OSError("log file vanished"), SilverRunReport((5, 0)),
                     *[OSError("disk gone")] * MAX_FAILED_PASSES])

    def run_once():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.raises(OSError, match="disk gone"):
        run_continuously(run_once, 0.001, stop)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings[0] == ("silver run failed (1 in a row; the loop stops at 5); trying "
                           "again next pass")
    assert len(warnings) == MAX_FAILED_PASSES  # 1, then 1-4 after the good run


def test_an_error_of_the_pipeline_itself_ends_the_loop_at_once():
    def run_once():
        raise ConfigError("--table x: not in source.tables")

    with pytest.raises(ConfigError):
        run_continuously(run_once, 0.001, threading.Event())
