"""Prometheus metrics of the long-running verbs (`ingest`, `backfill`, `silver --continuous`,
`run`), served with prometheus_client when `--metrics-port` or the config asks:
`metrics.port` for the service a config describes (`ingest`, or `run`: they never run
together), `metrics.silver_port` for `silver --continuous`, the flag alone for a
`backfill`, a one-off run beside them.

This module knows no stage: it holds the primitives and the endpoint. Each stage keeps
its own metrics next to its code and records them as it works: changes landed in bronze
(pipelines/ingest/landed_metrics.py), silver runs (pipelines/silver/run_metrics.py),
backfill rows (pipelines/backfill/progress.py), errors (here, everyone's). What holds
whether or not anyone runs is read from its source of truth at each scrape
(pipelines/metrics_collectors.py): the slot from Postgres, bronze's last commit and
silver's progress from the lake. So slot lag keeps rising on the endpoint of `silver
--continuous` while the ingest is down.

`lakehouse run` serves one port. Its ingest is a child process, whose counters live
there; the child serves them on a loopback port `run` picks, and `run`'s endpoint fetches
them at each scrape and merges them into its own (`with_child`), next to
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
import urllib.parse
import urllib.request
from typing import Callable, Iterable, Iterator, Mapping, Sequence

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

log = logging.getLogger(__name__)

# A counter's `_created` series doubles every counter for little use, and `run`'s merge
# would add the child's creation times to its own.
disable_created_metrics()

ERROR_KINDS = ("source", "storage", "data", "silver_table", "unexpected")

# Errors a process lives through. One that ends it (the ingest's corrupt message or lost
# slot) ends its endpoint too, so it is not counted: the endpoint going down says it.
ERRORS = Counter(
    "lakehouse_errors", "Errors the process went on after, by kind: source (unreachable, "
    "replication connection lost, a scrape's slot query), storage (the lake), data (a "
    "backfill chunk bronze cannot take), silver_table (a silver table a run could not "
    "apply), unexpected (a silver/gold pass that failed and is retried).", ["kind"])
for _kind in ERROR_KINDS:  # every kind exported from the start: rate() needs the zero
    ERRORS.labels(_kind)

Samples = Mapping[str, list[tuple[list[str], float]]]  # family name: (label values, value)


def counter(name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
    """A counter kept but not served: each verb's endpoint registers the ones it keeps
    (ERRORS, everyone's, is served by all)."""
    return Counter(name, help_text, labels, registry=None)


def gauge(name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
    """A gauge kept but not served, as `counter`."""
    return Gauge(name, help_text, labels, registry=None)


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


def gauge_families(helps: Mapping[str, str], labels: list[str],
                   values: Samples) -> Iterator[Metric]:
    """A gauge family per name in `helps` with its (label values, value) samples in
    `values` (none: a family with no samples, which is what `describe` returns)."""
    for name, help_text in helps.items():
        family = GaugeMetricFamily(name, help_text, labels=labels)
        for label_values, value in values.get(name, []):
            family.add_metric(label_values, value)
        yield family


class GaugeCollector(Collector):
    """Gauge families read at each scrape: `read()` returns their samples."""

    def __init__(self, helps: Mapping[str, str], labels: list[str],
                 read: Callable[[], Samples]) -> None:
        self.helps = helps
        self.labels = labels
        self.read = read

    def describe(self) -> Iterator[Metric]:
        return gauge_families(self.helps, self.labels, {})

    def collect(self) -> Iterator[Metric]:
        return gauge_families(self.helps, self.labels, self.read())


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


def with_child(child_port: int, families: Sequence[str]) -> CollectorRegistry:
    """A registry of this process's metrics plus a child process's `families` (counters),
    fetched from its loopback endpoint at each scrape (see the module docstring)."""
    query = urllib.parse.urlencode([("name[]", f"{name}_total") for name in families])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_WithChild(f"http://127.0.0.1:{child_port}/metrics?{query}",
                                 frozenset(families)))
    return registry


class _WithChild(Collector):
    """REGISTRY's families and the child's `families`; a family both have (the errors)
    with its samples merged. The child is asked for these only, so its scrape-time
    collectors do not run for nothing."""

    def __init__(self, url: str, families: frozenset[str]) -> None:
        self.url = url
        self.families = families

    def collect(self) -> Iterator[Metric]:
        child = {family.name: family for family in self._child()
                 if family.name in self.families}
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
        except OSError:  # starting, or gone (`run`: lakehouse_ingest_up says which)
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
