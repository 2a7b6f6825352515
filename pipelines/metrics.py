"""Prometheus metrics of the long-running verbs (`ingest`, `backfill`, `silver --continuous`,
`run`), served with prometheus_client when `--metrics-port` or the config asks:
`metrics.port` for the service a config describes (`ingest`, or `run`: they never run
together), `metrics.silver_port` for `silver --continuous`, the flag alone for a
`backfill`, a one-off run beside them.

What a process does itself it counts as it happens: changes landed in bronze, silver
runs, backfill rows, errors. What holds whether or not anyone runs is read from its
source of truth at each scrape (pipelines/metrics_collectors.py): the slot from
Postgres, bronze's last commit and silver's progress from the lake. So slot lag keeps
rising on the endpoint of `silver --continuous` while the ingest is down.

`lakehouse run` serves one port. Its ingest is a child process, whose counters live
there; the child serves them on a loopback port `run` picks, and `run`'s endpoint fetches
them at each scrape and merges them into its own (`with_ingest_child`), next to
`lakehouse_ingest_up`. Not prometheus_client's multiprocess mode: it must be switched on
by an environment variable before the library is imported (the CLI imports it with the
verbs, before it knows the verb), needs a directory whose stale files would be summed
into the counters after a killed child, and has no callback gauges. The child is a plain
`lakehouse ingest --metrics-port`, the same process an operator runs as a service.

Metric names, types and labels are an interface dashboards and alerts depend on
(docs/operations.md, Metrics): keep them stable.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

import psycopg
from deltalake.exceptions import DeltaError
from prometheus_client import (REGISTRY, CollectorRegistry, Counter, Gauge,
                               disable_created_metrics, start_http_server)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from pipelines.config import PORTS, Config, is_port
from pipelines.errors import ConfigError, DataError, SourceError, StorageError

if TYPE_CHECKING:
    from pipelines.backfill.progress import TableProgress  # it imports this module
    from pipelines.silver.job import SilverRunReport  # Spark's: not for ingest, backfill

log = logging.getLogger(__name__)

# A counter's `_created` series doubles every counter for little use, and `run`'s merge
# would add the child's creation times to its own.
disable_created_metrics()

ERROR_KINDS = ("source", "storage", "data", "silver_table", "unexpected")

# Each verb's endpoint registers what it keeps (INGEST, SILVER, BACKFILL); ERRORS is
# everyone's. Unregistered metrics still count, they are only not served.
LANDED_CHANGES = Counter(
    "lakehouse_ingest_landed_changes", "Changes committed to bronze by the ingest.",
    registry=None)
LANDED_BYTES = Counter(
    "lakehouse_ingest_landed_bytes", "Bytes of the bronze rows the ingest committed, as "
    "Arrow holds them in memory (the ZSTD Parquet files are smaller).", registry=None)
INGEST = (LANDED_CHANGES, LANDED_BYTES)
# Errors a process lives through. One that ends it (the ingest's corrupt message or lost
# slot) ends its endpoint too, so it is not counted: the endpoint going down says it.
ERRORS = Counter(
    "lakehouse_errors", "Errors the process went on after, by kind: source (unreachable, "
    "replication connection lost, a scrape's slot query), storage (the lake), data (a "
    "backfill chunk bronze cannot take), silver_table (a silver table a run could not "
    "apply), unexpected (a silver/gold pass that failed and is retried).", ["kind"])
for _kind in ERROR_KINDS:  # every kind exported from the start: rate() needs the zero
    ERRORS.labels(_kind)
SILVER_RUN_SECONDS = Gauge(
    "lakehouse_silver_last_run_duration_seconds", "Seconds the last silver run that had "
    "new bronze for the table spent applying it.", ["table"], registry=None)
SILVER_RUN_CHANGES = Gauge(
    "lakehouse_silver_last_run_changes", "Bronze changes (inserts, updates, deletes) the "
    "last silver run that had new bronze for the table applied.", ["table"], registry=None)
SILVER = (SILVER_RUN_SECONDS, SILVER_RUN_CHANGES)
# What `run` takes from its ingest child: the counters the ingest keeps (family names).
CHILD_FAMILIES = ("lakehouse_ingest_landed_changes", "lakehouse_ingest_landed_bytes",
                  "lakehouse_errors")
# The child is asked for these only, so its scrape-time collectors do not run for nothing.
_CHILD_QUERY = urllib.parse.urlencode([("name[]", f"{name}_total") for name in CHILD_FAMILIES])


def count_error(kind: str) -> None:
    ERRORS.labels(kind).inc()


def error_kind(exc: BaseException) -> str:
    """The `kind` label of an error that ended a piece of work."""
    if isinstance(exc, (SourceError, psycopg.Error)):
        return "source"
    if isinstance(exc, DataError):
        return "data"
    if isinstance(exc, (StorageError, OSError, DeltaError)):
        return "storage"
    return "unexpected"


def record_silver_run(report: SilverRunReport) -> None:
    """A silver run's per-table figures."""
    for table in report.tables:
        if table.error:
            count_error("silver_table")
            continue
        SILVER_RUN_SECONDS.labels(table.table).set(table.seconds)
        SILVER_RUN_CHANGES.labels(table.table).set(table.inserts + table.updates
                                                   + table.deletes)


# --- backfill progress --------------------------------------------------------------------


def gauge_families(helps: Mapping[str, str], labels: list[str],
                   values: Mapping[str, list[tuple[list[str], float]]]) -> Iterator[Metric]:
    """A gauge family per name in `helps` with its (label values, value) samples in
    `values` (none: a family with no samples, which is what `describe` returns)."""
    for name, help_text in helps.items():
        family = GaugeMetricFamily(name, help_text, labels=labels)
        for label_values, value in values.get(name, []):
            family.add_metric(label_values, value)
        yield family


class BackfillMetrics(Collector):
    """Rows done, the row estimate and the ETA per table, read at each scrape from the
    records the backfill's progress tracker keeps (pipelines.backfill.progress): one
    bookkeeping and one rate for the bars, the log lines and the metrics."""

    HELP = {
        "lakehouse_backfill_rows_done": "Rows of the table's backfill done so far (all "
        "runs).",
        "lakehouse_backfill_rows_estimate": "Rows the table had when its backfill started "
        "(pg_class.reltuples).",
        "lakehouse_backfill_eta_seconds": "Seconds until the backfill reaches the estimate "
        "at this run's rate; 0 when done, absent before the first chunk and after an "
        "interrupted run.",
    }

    def __init__(self) -> None:
        self._tables: dict[str, TableProgress] = {}
        self._lock = threading.Lock()  # table jobs start in parallel threads

    def track(self, table: TableProgress) -> None:
        """Serve this table's record (in place of an earlier run's)."""
        with self._lock:
            self._tables[table.table] = table

    def describe(self) -> Iterator[Metric]:
        return gauge_families(self.HELP, ["table"], {})

    def collect(self) -> Iterator[Metric]:
        values: dict[str, list] = {name: [] for name in self.HELP}
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            values["lakehouse_backfill_rows_done"].append(([t.table], t.done))
            if t.estimate:
                values["lakehouse_backfill_rows_estimate"].append(([t.table], t.estimate))
            left = t.eta()
            if left is not None:
                values["lakehouse_backfill_eta_seconds"].append(([t.table], left))
        return gauge_families(self.HELP, ["table"], values)


BACKFILL = BackfillMetrics()


# --- the endpoint -------------------------------------------------------------------------


def add_port_argument(parser: argparse.ArgumentParser, key: str | None = "port",
                      when: str = "") -> None:
    """--metrics-port, over the config's `metrics.<key>` (None: the flag alone)."""
    default = f"default: metrics.{key}; none without either" if key else "none without it"
    parser.add_argument("--metrics-port", type=int, metavar="N",
                        help=f"{when}serve Prometheus metrics on http://HOST:N/metrics "
                        f"({default})")


def serve(config: Config, port: int | None, *collectors: Collector, key: str | None = "port",
          registry: CollectorRegistry = REGISTRY) -> int | None:
    """Start the endpoint on `port` (else the config's `metrics.<key>`, `port` or
    `silver_port`; None: the flag alone; neither: no endpoint) serving `registry`, with
    these collectors added to REGISTRY; returns the port. A bad or busy port is a
    ConfigError (exit 2)."""
    if port is None and key is not None:
        port = getattr(config.metrics, key)
    if port is None:
        return None
    if not is_port(port):
        raise ConfigError(f"--metrics-port: got {port}, expected {PORTS}")
    address = config.metrics.address
    for collector in collectors:
        _register(collector)
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        where = "--metrics-port" + (f" or metrics.{key}" if key else "")
        raise ConfigError(f"metrics port {port} on {address}: {exc.strerror} (another "
                          f"process listening there? choose another with {where})") from exc
    host = socket.gethostname() if address in ("0.0.0.0", "::") else address
    log.info("metrics: http://%s:%d/metrics", host, port)
    return port


def _register(collector: Collector) -> None:
    """Add `collector` to REGISTRY, in place of one with the same metric names that an
    earlier endpoint of this process registered (a second demo in one process, tests):
    registering those names twice raises."""
    names = frozenset(family.name for family in collector.describe())
    before = _SERVED.get(names)
    if before is collector:
        return
    if before is not None:
        REGISTRY.unregister(before)
    REGISTRY.register(collector)
    _SERVED[names] = collector


_SERVED: dict[frozenset[str], Collector] = {}


INGEST_UP = Gauge("lakehouse_ingest_up", "1 while the ingest process of `lakehouse run` "
                  "runs, else 0.", registry=None)


def watch_ingest(running: Callable[[], bool]) -> None:
    """`lakehouse_ingest_up`, for `run`: only it knows whether its ingest runs."""
    INGEST_UP.set_function(lambda: 1 if running() else 0)


def with_ingest_child(child_port: int) -> CollectorRegistry:
    """A registry of this process's metrics plus the ingest child's, fetched from its
    loopback endpoint at each scrape (see the module docstring)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_WithChild(f"http://127.0.0.1:{child_port}/metrics?{_CHILD_QUERY}"))
    return registry


class _WithChild(Collector):
    """REGISTRY's families and the child's CHILD_FAMILIES; a family both have (the
    errors) with its samples merged."""

    def __init__(self, url: str) -> None:
        self.url = url

    def collect(self) -> Iterator[Metric]:
        child = {family.name: family for family in self._child()
                 if family.name in CHILD_FAMILIES}
        for family in REGISTRY.collect():
            if family.name in child:
                family.samples = merge_samples(family.samples,
                                               child.pop(family.name).samples)
            yield family
        yield from child.values()

    def _child(self) -> Iterable[Metric]:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as response:
                text = response.read().decode()
        except OSError:  # starting, or gone: lakehouse_ingest_up says which
            return []
        return text_string_to_metric_families(text)


def merge_samples(ours: list[Sample], theirs: list[Sample]) -> list[Sample]:
    """Samples of one counter from two processes: the same series summed."""
    totals: dict[tuple, Sample] = {}
    for sample in [*ours, *theirs]:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        before = totals.get(key)
        totals[key] = sample if before is None else before._replace(
            value=before.value + sample.value)
    return list(totals.values())
