import threading

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
