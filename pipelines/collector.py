"""The cyclic garbage collector, tuned for the CLI's long-running data movers."""

from __future__ import annotations

import gc


def collect_rarely() -> None:
    """Make the cyclic garbage collector run rarely in this process.

    The ingest and the backfill allocate a few small containers per change or row and
    free them by reference counting; their hot paths make no reference cycles. With the
    default thresholds the collector ran every 700 allocations and rescanned everything
    start-up loaded (pyspark, pyarrow, deltalake: each full pass ~40 ms) and the ingest's
    buffered rows: a fifth to a quarter of the ingest's CPU on bench/ingest_bench.py's
    workloads, ~5% of a backfill's. A collection now waits for a million more container
    allocations than deallocations: more than the ingest holds at once with the default
    settings (two per buffered change: a bronze batch, a streamed transaction's
    unspilled block), so in a steady stream it hardly runs. What start-up loaded is
    frozen out of every pass. Only the CLI verbs do this: they own their process;
    callers of run_ingest or run_backfill do not.
    """
    gc.freeze()
    gc.set_threshold(1_000_000, 10, 10)
