"""The Spark jobs a piece of work starts, on classic Spark.

On a classic driver every job costs a scheduling round trip, task launches and often a
Delta snapshot, whatever it holds: the number of jobs is the fixed toll a silver run
pays. Benchmarks report it beside the seconds, and tests pin it (a count is exact).
Spark Connect sessions (Sail, engine connect) expose no job tracker: there it is None.
"""

from __future__ import annotations

import functools
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GROUP = "spark.jobGroup.id"
DESCRIPTION = "spark.job.description"


@dataclass
class JobCount:
    """The jobs started inside a `counted_jobs` block (None: the session cannot say)."""

    jobs: int | None = None
    group: str = field(default_factory=lambda: f"lakehouse-{uuid.uuid4().hex}")


@contextmanager
def counted_jobs(spark: "SparkSession", label: str = "lakehouse") -> Iterator[JobCount]:
    """Count the jobs the block starts, Delta's background ones included (they inherit
    the job group). The session's own job group is restored afterwards."""
    count = JobCount()
    context = _context(spark)
    if context is None:
        yield count
        return
    before = context.getLocalProperty(GROUP), context.getLocalProperty(DESCRIPTION)
    context.setJobGroup(count.group, label)
    try:
        yield count
    finally:
        count.jobs = len(context.statusTracker().getJobIdsForGroup(count.group))
        context.setLocalProperty(GROUP, before[0])
        context.setLocalProperty(DESCRIPTION, before[1])


Result = TypeVar("Result")
Item = TypeVar("Item")


def in_this_threads_group(spark: "SparkSession",
                          work: Callable[..., Result]) -> Callable[..., Result]:
    """`work`, to be called in other threads, with this thread's job group and local
    properties on a classic driver (a pool thread starts without them, so its jobs
    would escape `counted_jobs`); as it is on a Connect session.

    Each call gets a copy of its own. pyspark's `inheritable_thread_target` hands every
    thread the one copy it took: a SQL statement sets its execution's ids in the local
    properties while it runs and removes them after, so another thread's statement then
    read them gone ("NumberFormatException: Cannot parse null string" in a MERGE)."""
    context = _context(spark)
    if context is None:
        return work
    callers = context._jsc.sc().getLocalProperties().clone()

    @functools.wraps(work)
    def in_thread(*args, **kwargs) -> Result:
        context._jsc.sc().setLocalProperties(callers.clone())
        return work(*args, **kwargs)

    return in_thread


def map_in_threads(spark: "SparkSession", work: Callable[[Item], Result],
                   items: Sequence[Item], parallel: int, name: str) -> list[Result]:
    """`work` over `items`, `parallel` at a time in threads named `name`, in the caller's
    job group: independent tables' jobs wait mostly on planning, scheduling and storage
    round trips (a classic driver, a cluster), which the others' jobs fill."""
    with ThreadPoolExecutor(max(1, min(parallel, len(items))), thread_name_prefix=name) as pool:
        return list(pool.map(in_this_threads_group(spark, work), items))


def is_classic(spark: "SparkSession") -> bool:
    """Whether this process drives the session (classic Spark, Databricks) rather than
    a Spark Connect server, which may be Sail's."""
    return _context(spark) is not None


def _context(spark: "SparkSession"):
    """The session's SparkContext, or None for a Spark Connect session."""
    try:
        return spark.sparkContext
    except Exception:  # a Connect session refuses; its error class differs by version
        return None
