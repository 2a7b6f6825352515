"""Property: a history table agrees with silver at every position, however bronze is cut.

test_property's random histories (and one with a failover and a resync) land one landing
at a time, a silver run after each landing of changes recording silver's rows and the
run's position. Then:
1. one batch, slices of a few rows, a replay from an earlier position and the runs of
   one landing each give the same history table, every column included;
2. the history as of each run's position is silver after that run, once what a later
   backfill chunk completed (a TOAST value the stream never sent) is carried back over
   the version, which a chunk row never splits; its current rows are silver;
3. it equals `reference_versions`, a pure-Python SCD2 model of the recorded runs.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.bronze.generations import Generation, Registry
from pipelines.config import Config
from pipelines.lake import Lake
from pipelines.silver import scan
from pipelines.silver.history import as_of
from pipelines.silver.job import run_silver
from pipelines.silver.progress import TableProgress, write_progress
from tests.support.bronze_builder import BronzeLake
from tests.support.config import make_config
from tests.support.random_history import generate, generate_failover, land

pytestmark = pytest.mark.spark

Position = tuple[int, int]
Change = tuple[Position, str]  # where a key changed, and the bronze op that changed it
COLUMNS = ("id", "name", "doc", "_valid_from", "_valid_to", "_valid_from_ts", "_valid_to_ts",
           "_is_current", "_op", "_lsn", "_change_index", "_commit_ts")


@dataclass(frozen=True)
class Run:
    """One silver run over one landing of changes, and silver's rows after it."""

    upto: Position
    silver: dict[int, tuple[tuple, tuple]]  # id -> ((name, doc), (_lsn, index, _commit_ts))
    changed: dict[int, Change]  # the landing's change of each key it touched
    every_key: Change | None  # a truncate or a watermark: one change of every key

    @property
    def chunk(self) -> bool:
        """A watermark's run: where chunk rows apply (at high ones)."""
        return self.every_key is not None and self.every_key[1] == "snapshot"


@dataclass(frozen=True)
class Played:
    """A history applied one landing per run, and what the runs recorded."""

    seed: int
    landed: list[tuple[str, list[dict]]]
    start: int | None  # where a failover's new slot generation starts
    root: Path  # the lake
    runs: list[Run]
    history: list[tuple]  # the history table after the last run, rows sorted
    stamps: dict[int, datetime]  # commit LSN -> commit time, as the engine returns it


def new_lake(root: Path, start: int | None) -> BronzeLake:
    """A bronze lake; with `start`, one whose second slot generation starts there."""
    if start is not None:
        Registry(Lake.of(root)).record(
            Generation(1, "lakehouse", "test", 2, start, 0, ("public.items",)))
    return BronzeLake(root)


def history_config(root: Path, **silver) -> Config:
    return make_config(lake=root, silver={"history": "*", **silver})


def sort(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((v is None, v) for v in r))


def history_rows(spark, root: Path) -> list[tuple]:
    path = str(root / "silver_history" / "public" / "items")
    return sort(spark.read.format("delta").load(path).select(*COLUMNS).collect())


def silver_rows(spark, root: Path) -> dict[int, tuple[tuple, tuple]]:
    df = spark.read.format("delta").load(str(root / "silver" / "public" / "items"))
    return {r[0]: (tuple(r[1:3]), tuple(r[3:])) for r in df.select(
        "id", "name", "doc", "_lsn", "_change_index", "_commit_ts").collect()}


def changes_of(rows: list[dict]) -> tuple[dict[int, Change], Change | None]:
    """Each key a transaction changed, or the one change of every key a truncate or a
    watermark (chunk rows apply at high ones) is."""
    changed: dict[int, Change] = {}
    for row in rows:
        at = (row["commit_lsn"], row["change_index"])
        if row["op"] in ("truncate", "message"):
            return {}, (at, "snapshot" if row["op"] == "message" else "truncate")
        for values, op in ((row.get("old_values"), "delete"), (row["values"], row["op"])):
            if values and values[0] is not None:
                # runs could not show a version opened and closed inside one transaction
                assert int(values[0]) not in changed, "a key changed twice in a transaction"
                changed[int(values[0])] = (at, op)
    return changed, None


CASES = {"12": (12, False), "14": (14, False), "failover0": (0, True)}
# Classic Spark takes many minutes per case (a run per landing, each paying Spark's
# toll): it plays seed 14 (truncates, TOAST carried back); Sail plays all three. On
# classic Spark a resync end's closings are checked step by step (test_history_steps.py),
# truncates' closings by test_history_job.py and the failover end to end by
# tests/end_to_end/test_failover.py.
SAIL_ONLY = ("12", "failover0")


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        # a case's tests share one worker, which plays its history once (`played`)
        metafunc.parametrize("case", [pytest.param(case, id=i, marks=[
            pytest.mark.xdist_group(f"history_property_{i}"),
            *([pytest.mark.sail_only] if i in SAIL_ONLY else [])])
            for i, case in CASES.items()], scope="module")


@pytest.fixture(scope="module")
def played(case, spark, tmp_path_factory):
    """A random history applied one landing per run (test_property's seeds, and a
    failover whose resync end, alone in a run, deletes a row a lost primary wrote)."""
    seed, failover = case
    history, _, start = generate_failover(seed) if failover else (*generate(seed), None)
    lake = new_lake(tmp_path_factory.mktemp(f"history_{seed}"), start)
    config, runs = history_config(lake.root), []
    for kind, rows in history.landed:
        land(lake, [(kind, rows)])
        if kind == "changes":
            report = run_silver(config, spark)
            assert not report.failed
            assert report.upto == (rows[-1]["commit_lsn"], rows[-1]["change_index"])
            runs.append(Run(report.upto, silver_rows(spark, lake.root), *changes_of(rows)))
    stamps = dict(spark.read.format("delta").load(str(lake.root / "bronze" / "changes"))
                  .select("commit_lsn", "commit_ts").distinct().collect())
    yield Played(seed, history.landed, start, lake.root, runs, history_rows(spark, lake.root),
                 stamps)
    shutil.rmtree(lake.root, ignore_errors=True)


def completed(runs: list[Run]) -> list[dict[int, tuple]]:
    """Silver's values after each run, with what a chunk changed in a version (a high
    watermark run: no split) carried back to the version's start, latest chunk first."""
    states = [{k: v[0] for k, v in run.silver.items()} for run in runs]
    for i in reversed(range(1, len(runs))):
        if not runs[i].chunk:
            continue
        for key, now in states[i].items():
            j = i - 1
            while j >= 0 and key in runs[j].silver and (
                    runs[j].silver[key][0] == runs[j + 1].silver[key][0]
                    or runs[j + 1].chunk):
                states[j][key], j = now, j - 1
    return states


def number(at: Position) -> int:
    return at[0] * 10 ** 10 + at[1]


@dataclass
class Version:
    """One version in the model: its values, where it opened and closed, its last change."""

    key: int
    values: tuple
    opened: Position
    op: str
    last: tuple = ()  # silver's _lsn, _change_index, _commit_ts at its last state
    closed: Position | None = None

    def row(self, stamps: dict[int, datetime]) -> tuple:
        end = self.closed and number(self.closed)
        return (self.key, *self.values, number(self.opened), end, stamps[self.opened[0]],
                self.closed and stamps[self.closed[0]], end is None, self.op, *self.last)


def reference_versions(played: Played) -> list[tuple]:
    """The history table (COLUMNS) an SCD2 model of the runs expects.

    Each landing of changes is one transaction touching a key at most once (changes_of
    checks), a truncate or a watermark: the runs' states are at change granularity. With
    every column tracked, a version of a key opens where silver gains the key or, but at
    a watermark (a chunk row never splits a version), changes its values; it opens at
    the landing's change of the key (op insert or update; at a watermark: snapshot) and
    closes at the next. Its values are the completed ones, its last change silver's at
    its last state. Positions, ops and times come from the landed bronze, values from
    silver: nothing from the history code.
    """
    versions: list[Version] = []
    open_: dict[int, Version] = {}
    before: dict[int, tuple[tuple, tuple]] = {}
    for run, state in zip(played.runs, completed(played.runs)):
        for key in sorted(set(open_) | set(state)):
            at, op = run.changed.get(key) or run.every_key or (None, None)
            if key in open_ and (key not in state or not run.chunk
                                 and run.silver[key][0] != before[key][0]):
                assert at, f"silver changed {key} in a run that did not touch it"
                open_.pop(key).closed = at
            if key in state and key not in open_:
                assert at, f"silver added {key} in a run that did not touch it"
                open_[key] = Version(key, state[key], at, op)
                versions.append(open_[key])
            if key in state:
                open_[key].last = run.silver[key][1]
        before = run.silver
    return sort(v.row(played.stamps) for v in versions)


def test_any_batching_and_replay_give_the_same_history(spark, tmp_path, played, monkeypatch):
    rng = random.Random(played.seed)
    for name, kwargs in (("whole", {}), ("sliced", {"max_batch_rows": rng.randint(3, 8)})):
        lake = new_lake(tmp_path / name, played.start)
        land(lake, played.landed)
        with monkeypatch.context() as patch:
            if name == "whole":  # staged as Parquet, as a large batch is (played: held)
                patch.setattr(scan, "SMALL_BATCH_ROWS", 0)
            assert not run_silver(history_config(lake.root, **kwargs), spark).failed
        assert history_rows(spark, lake.root) == played.history, name
    assert DeltaTable(str(lake.layout.state("silver_progress"))).version() > 0  # sliced

    # Replay the sliced lake after an earlier position (as after lost progress).
    back = rng.choice([r for kind, rows in played.landed if kind == "changes" for r in rows])
    write_progress(lake.layout.state("silver_progress"),
                   {"public.items": TableProgress((back["commit_lsn"], back["change_index"]))},
                   None)
    assert run_silver(history_config(lake.root), spark).upto is not None
    assert history_rows(spark, lake.root) == played.history
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_history_as_of_each_run_is_silver_then(spark, played):
    history = spark.read.format("delta").load(
        str(played.root / "silver_history" / "public" / "items"))
    for run, state in zip(played.runs, completed(played.runs)):
        expected = sort((k, *v) for k, v in state.items())
        assert sort(as_of(history, run.upto).collect()) == expected, run.upto
        # each run is one commit: its commit time shows the same table
        assert sort(as_of(history, played.stamps[run.upto[0]]).collect()) == expected
    final = played.runs[-1].silver
    assert [r[:3] for r in played.history if r[7]] == sort((k, *v[0]) for k, v in final.items())


def test_history_is_the_reference_scd2_model(played):
    expected = reference_versions(played)
    assert any(r[8] == "snapshot" for r in expected) and any(not r[7] for r in expected)
    assert played.history == expected
