import threading
import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipelines.errors import ConfigError
from pipelines.lake import TableLocation
from pipelines.passes import MAX_FAILED_PASSES
from pipelines.silver.command import run_continuously
from pipelines.silver.job import SilverRunReport, TableReport
from pipelines.silver.trigger import Trigger


class Bronze:
    """A real Delta table standing in for bronze: the trigger watches its versions."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def commit(self) -> None:
        write_deltalake(self.path, pa.table({"x": [1]}), mode="append")

    def trigger(self, interval: float = 0.001, poll: float = 0.01) -> Trigger:
        return Trigger(TableLocation(self.path), interval, poll)


@pytest.fixture
def bronze(tmp_path) -> Bronze:
    return Bronze(tmp_path / "bronze")


def test_continuous_runs_until_stopped_and_logs_a_stopped_table_once(caplog, capsys, bronze):
    stop = threading.Event()
    failed = TableReport("public.bad", error="column v changed type")
    reports = iter([SilverRunReport((5, 0), (failed,)), SilverRunReport(None),
                    SilverRunReport((6, 0), (failed, TableReport("public.items", inserts=2)))])

    def run_once():
        report = next(reports)
        if report.upto == (6, 0):
            stop.set()
        bronze.commit()  # something new for the next run
        return report

    assert run_continuously(run_once, bronze.trigger(), stop) == 3
    assert [r.message for r in caplog.records].count(
        "silver public.bad stopped: column v changed type") == 1
    out = capsys.readouterr().out
    assert "public.items: 2 inserts, 0 updates, 0 deletes" in out
    assert "public.bad: STOPPED: column v changed type" in out


def test_a_run_that_raises_is_tried_again_and_a_run_that_keeps_raising_ends_the_loop(caplog,
                                                                                    bronze):
    stop = threading.Event()
    outcomes = iter([OSError("log file vanished"), SilverRunReport((5, 0)),
                     *[OSError("disk gone")] * MAX_FAILED_PASSES])

    def run_once():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome  # tried again without anything new in bronze
        bronze.commit()
        return outcome

    with pytest.raises(OSError, match="disk gone"):
        run_continuously(run_once, bronze.trigger(), stop)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings[0] == ("silver run failed (1 in a row; the loop stops at 5); trying "
                           "again next pass")
    assert len(warnings) == MAX_FAILED_PASSES  # 1, then 1-4 after the good run


def test_an_error_of_the_pipeline_itself_ends_the_loop_at_once(bronze):
    def run_once():
        raise ConfigError("--table x: not in source.tables")

    with pytest.raises(ConfigError):
        run_continuously(run_once, bronze.trigger(), threading.Event())


def test_a_run_starts_when_bronze_has_a_new_commit_and_not_before(bronze):
    """No bronze yet: one run. Then none while bronze stays as it is; each new commit
    starts one at once; commits that land during a run start one more after it; runs
    start at least the interval apart."""
    stop, starts = threading.Event(), []

    def run_once():
        starts.append(time.monotonic())
        if len(starts) == 3:  # two commits land while this run is busy
            bronze.commit()
            bronze.commit()
        return SilverRunReport(None)

    loop = threading.Thread(target=run_continuously,
                            args=(run_once, bronze.trigger(interval=0.3), stop))
    loop.start()
    try:
        time.sleep(0.5)
        assert len(starts) == 1  # bronze did not change: no second run
        bronze.commit()
        committed = time.monotonic()
        time.sleep(0.5)
        assert len(starts) == 2 and starts[1] - committed < 0.2
        bronze.commit()
        time.sleep(1.0)
        assert len(starts) == 4  # the two commits during run 3 need one run, not two
        assert min(b - a for a, b in zip(starts, starts[1:])) >= 0.3
    finally:
        stop.set()
        loop.join(5)
