"""The lake's one home: where it lives (a local directory or an object store URL), where
each Delta table lives in it, whether a table is there, and how delta-rs reaches it
(docs/architecture.md, Interfaces; docs/storage.md).

Every stage finds its tables through a `Lake`: bronze and the pipeline's state (delta-rs),
silver and gold (Spark, by the same URI). How each engine is configured to reach the
store is pipelines.storage's business; this module hands delta-rs its options and lists
and deletes the odd file (log trimming, verify's scratch files) through obstore, which
takes the same option names.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Mapping, Union

from pipelines import storage
from pipelines.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from obstore.store import ObjectStore

# How far back the Delta log of the tables the pipeline commits to is kept, unless
# `lake.log_retention` says otherwise (docs/operations.md, "Delta logs stay short"). Log
# files older than this that a later checkpoint replaces are deleted (delta-rs tables: by
# delta-rs after each commit; Sail's and Spark's: by trim_log), so time travel reaches
# back at least this far. Short on every store: delta-rs 1.6 lists the
# whole _delta_log after each of its commits to delete the expired files (on S3 too),
# and a local file system lists it on every Delta read and commit besides; the ingest
# commits up to once a second, silver every run. Measured by bench/delta_log_bench.py:
# after 5,000 commits a delta-rs append took 4.9x (local disk) and 8.3x (MinIO) as long
# as next to a short log, after 20,000 15x and 33x. No reader of the pipeline needs older
# versions (silver reads bronze by position).
LOG_RETENTION_KEY = "delta.logRetentionDuration"
LOG_RETENTION = "interval 10 minutes"  # the default of lake.log_retention
# The spellings every engine parses (delta-rs: "interval N unit", one unit, lower case)
_RETENTION = re.compile(r"(?:interval\s+)?(\d+)\s*(second|minute|hour|day|week)s?", re.I)
TRIM_LOG_ENTRIES = 200  # trim_log works only on a log with more entries than this
DELTA_LOG = "_delta_log"


def parse_log_retention(text: object, key: str = "lake.log_retention") -> str:
    """A log retention as the Delta interval every engine parses ("interval 7 days"), from
    a whole number of seconds, minutes, hours, days or weeks ("36 hours", "7 days"),
    with or without Delta's "interval"; ConfigError naming `key` otherwise."""
    match = _RETENTION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"{key}: got {text!r}, expected a duration such as '10 minutes', "
                          "'36 hours' or '7 days' (a whole number of seconds, minutes, hours, "
                          "days or weeks)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return f"interval {number} {unit}{'' if number == 1 else 's'}"


@dataclass(frozen=True)
class Lake:
    """The lake root (an absolute local path or a store URL such as s3://bucket/prefix),
    its non-secret storage options (delta-rs / object_store names) and the Delta log
    retention of the tables the pipeline commits to (a setting, not part of the place:
    it takes no part in comparisons)."""

    root: str
    options: tuple[tuple[str, str], ...] = ()
    log_retention: str = field(default=LOG_RETENTION, compare=False)

    @classmethod
    def of(cls, root: str | os.PathLike[str], options: Mapping[str, str] | None = None,
           log_retention: str = LOG_RETENTION) -> "Lake":
        return cls(str(root).rstrip("/") or "/", tuple(sorted((options or {}).items())),
                   parse_log_retention(log_retention))

    @classmethod
    def from_config(cls, config) -> "Lake":
        """The lake of a loaded Config (config.lake)."""
        return cls.of(config.lake.path, config.lake.storage_options, config.lake.log_retention)

    @property
    def store(self) -> str | None:
        """"s3", "azure" or "gcs"; None for a local (or mounted) file system."""
        return storage.store_kind(self.root)

    @property
    def is_local(self) -> bool:
        return self.store is None

    def table(self, *parts: str) -> "TableLocation":
        """The table at root/part/part/..."""
        return TableLocation("/".join([self.root, *parts]), self.options, self.log_retention)

    @property
    def bronze_changes(self) -> "TableLocation":
        return self.table("bronze", "changes")

    @property
    def bronze_snapshots(self) -> "TableLocation":
        return self.table("bronze", "snapshots")

    def silver(self, schema: str, table: str) -> "TableLocation":
        return self.table("silver", schema, table)

    def silver_history(self, schema: str, table: str) -> "TableLocation":
        """A silver table's history: one row per version of each key (silver/history.py)."""
        return self.table("silver_history", schema, table)

    def gold(self, report: str) -> "TableLocation":
        return self.table("gold", report)

    def state(self, *parts: str) -> "TableLocation":
        """Pipeline bookkeeping (not for analysts): _state/..."""
        return self.table("_state", *parts)

    @property
    def silver_progress(self) -> "TableLocation":
        """Each silver table's applied bronze position."""
        return self.state("silver_progress")

    @property
    def backfills(self) -> "TableLocation":
        """Each backfill's cursor and status."""
        return self.state("backfills")

    @property
    def slot_generations(self) -> "TableLocation":
        """Which slot, server and timeline bronze's positions came from (recover)."""
        return self.state("slot_generations")

    def tombstones(self, schema: str, table: str) -> "TableLocation":
        """The deleted keys of a silver table, with their positions."""
        return self.state("silver_tombstones", schema, table)

    def staging(self, schema: str, table: str) -> "TableLocation":
        """A silver run's typed batch (Parquet, overwritten by the next run)."""
        return self.state("silver_staging", schema, table)

    def history_staging(self, schema: str, table: str, part: str) -> "TableLocation":
        """What a silver run stages for a history table (Parquet, overwritten by the next
        run): its events (all of them), the open versions they continue, the versions."""
        return self.state("silver_staging_history", schema, table, part)

    def children(self, *parts: str) -> list[str]:
        """Names of the directories (prefixes) right under root/part/..., sorted."""
        import obstore

        listing = obstore.list_with_delimiter(self._files, "/".join(parts) or None)
        return sorted(name.rstrip("/").rsplit("/", 1)[-1] for name in listing["common_prefixes"])

    def delta_tables(self, *parts: str) -> list[str]:
        """Names of the Delta tables right under root/part/..., sorted."""
        return [name for name in self.children(*parts) if self.table(*parts, name).exists()]

    def put(self, path: str, data: bytes) -> None:
        """Write one file at root/path (verify's scratch files)."""
        import obstore

        obstore.put(self._files, path, data)

    def delete_tree(self, prefix: str, modified_before: datetime | None = None) -> None:
        """Delete every file under root/prefix (only those last written before
        `modified_before`, if given); nothing there is fine."""
        import obstore

        paths = [meta["path"] for batch in obstore.list(self._files, prefix) for meta in batch
                 if modified_before is None or meta["last_modified"] < modified_before]
        if paths:
            obstore.delete(self._files, paths)

    def check_conditional_writes(self) -> None:
        """ConfigError unless the store refuses to create an object that exists: Delta
        commits rely on it to keep two writers from overwriting each other's version
        (local disks and Unity Catalog volumes have it)."""
        if self.is_local:
            return
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        probe = f"_state/.conditional-write-probe-{uuid.uuid4().hex}"
        obstore.put(self._files, probe, b"", mode="create")
        try:
            obstore.put(self._files, probe, b"", mode="create")
        except (AlreadyExistsError, PreconditionError):
            return
        finally:
            obstore.delete(self._files, probe)
        raise ConfigError(f"lake.path: the store behind {self.root} overwrote an existing "
                          "object on a create-only write: two writers could overwrite each "
                          "other's Delta commits. Use a store with conditional writes (AWS S3, "
                          "MinIO, Azure Blob, GCS; docs/storage.md)")

    def uri(self, path: str) -> str:
        """root/path as the engines address it (Spark reads verify's scratch files)."""
        return f"{self.root}/{path}"

    @cached_property
    def _files(self) -> "ObjectStore":
        return storage.object_store(self.root, dict(self.options))

    def __str__(self) -> str:
        return self.root


@dataclass(frozen=True)
class TableLocation:
    """One Delta table's place: its URI, and the lake's storage options delta-rs needs;
    with the lake's log retention (a Delta interval), which takes no part in comparisons."""

    uri: str
    options: tuple[tuple[str, str], ...] = ()
    log_retention: str = field(default=LOG_RETENTION, compare=False)

    @property
    def retention_properties(self) -> dict[str, str]:
        """The table property a table the pipeline creates carries: its log retention."""
        return {LOG_RETENTION_KEY: self.log_retention}

    @property
    def delta_options(self) -> dict[str, str] | None:
        """The storage_options for delta-rs (None on a local disk: its defaults)."""
        store = storage.store_kind(self.uri)
        return storage.delta_rs_options(store, dict(self.options)) if store else None

    def open(self) -> "DeltaTable":
        """The table (delta-rs); TableNotFoundError when there is none."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.delta_options)

    def exists(self) -> bool:
        """Whether a Delta table is here: the one test every stage uses (delta-rs reads
        the log; no Spark action)."""
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri, storage_options=self.delta_options)

    def create(self, schema: "pa.Schema", **kwargs) -> "DeltaTable":
        """Create the table unless it exists (DeltaTable.create, mode ignore)."""
        from deltalake import DeltaTable

        return DeltaTable.create(self.uri, schema=schema, mode="ignore",
                                 storage_options=self.delta_options, **kwargs)

    def __str__(self) -> str:
        return self.uri


Where = Union[TableLocation, str, os.PathLike]


def location(where: Where) -> TableLocation:
    """A table location, or a local path taken as one (tests, tools)."""
    return where if isinstance(where, TableLocation) else TableLocation(str(where))


def with_log_retention(table: "DeltaTable", metadata: dict[str, str] | None = None, *,
                       retention: str) -> "DeltaTable":
    """The table, its log retention set to `retention` (a Delta interval: its location's
    `log_retention`, never a default that would undo the setting), in one
    metadata commit if it had another (a table made before the setting, or
    lake.log_retention changed since; `metadata` goes into that commit's info). Only a
    table's sole writer may do this: the metadata commit fails a concurrent append."""
    from deltalake import CommitProperties

    if table.metadata().configuration.get(LOG_RETENTION_KEY) != retention:
        table.alter.set_table_properties(
            {LOG_RETENTION_KEY: retention},
            commit_properties=CommitProperties(custom_metadata=metadata))
    return table


def trim_log(where: Where) -> bool:
    """Delete the expired log files of a table another engine commits to (Sail writes
    checkpoints but never deletes a log file), once its log has more than
    TRIM_LOG_ENTRIES entries; True if it did. Called by the table's writer after a run.
    Expired: older than the location's retention (lake.log_retention), which the table
    is given first if it has another.

    delta-rs deletes the expired commits and checkpoints; the checksum files beside each
    commit (Sail's `N.crc`, Hadoop's `.N.json.crc`) go too, once their commit is gone:
    they describe nothing any more. Best effort: a failure is logged, the run goes on
    (the log is only longer than it should be).
    """
    table = location(where)
    try:
        files = storage.object_store(table.uri, dict(table.options))
        names = _log_names(files)
        if len(names) <= TRIM_LOG_ENTRIES:
            return False
        with_log_retention(table.open(), retention=table.log_retention).cleanup_metadata()
        names = _log_names(files)
        commits = [_version(name) for name in names if name.endswith(".json")]
        oldest = min((v for v in commits if v is not None), default=0)
        expired = [f"{DELTA_LOG}/{name}" for name in names if name.endswith(".crc")
                   and (version := _version(name)) is not None and version < oldest]
        if expired:
            import obstore

            obstore.delete(files, expired)
        return True
    except Exception:  # noqa: BLE001 - trimming must never fail the run that committed
        logging.getLogger(__name__).warning("could not trim the Delta log of %s", table,
                                            exc_info=True)
        return False


def _log_names(files: "ObjectStore") -> list[str]:
    import obstore

    return [meta["path"].rsplit("/", 1)[-1]
            for batch in obstore.list(files, DELTA_LOG) for meta in batch]


def _version(name: str) -> int | None:
    """The commit version a log file belongs to (00000000000000000012.json,
    00000000000000000012.crc, .00000000000000000012.json.crc); None for others."""
    digits = name.lstrip(".").split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def statistics_bound(actions: "pa.Table", column: str, pick: "Callable") -> int | None:
    """`pick` (pyarrow.compute's min or max) of a statistics column over a table's files
    (`DeltaTable.get_add_actions(flatten=True)`'s `min.<column>` or `max.<column>`), as
    an integer (a timestamp's Unix microseconds): a bound of the values, read from the log
    alone; None when a file has none.
    Bounds, not values: a row a deletion vector removed still counts in its file's."""
    import pyarrow as pa

    if column not in actions.column_names or actions.column(column).null_count:
        return None
    values = actions.column(column)
    if pa.types.is_timestamp(values.type):  # as Unix microseconds
        values = values.cast(pa.timestamp("us", values.type.tz)).cast(pa.int64())
    return int(pick(values).as_py())  # a decimal's digits exactly


def data_files(where: Where, column: str, low: int | None = None,
               high: int | None = None, *, past: tuple[str, int] | None = None,
               holding: tuple[str, str] | None = None) -> list[str]:
    """The URIs of the data files, in log order, whose statistics say they may hold a
    value of the integer `column` in [low, high] (a file without statistics may hold any):
    for an append-only table without partitions or deletion vectors (bronze), whose files
    are its rows, the files a read needs, chosen from the log alone.

    past: (column2, value) when only rows past (low, value) in (column, column2) order
    are wanted: a file whose `column` goes no higher than `low` and whose column2 no
    higher than `value` holds none (bronze's last file before a run's bound, which can be
    a large one: a backfill chunk, or an ingest's catch-up batch).

    holding: (column2, value) when only rows with that value of column2 are wanted: a
    file whose column2 is all nulls, or whose statistics put the value outside, holds
    none (bronze's watermark messages, in a few of its files)."""
    import pyarrow as pa

    where = location(where)
    actions = pa.table(where.open().get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    smallest, largest = statistic(actions, f"min.{column}"), statistic(actions, f"max.{column}")
    ties = statistic(actions, f"max.{past[0]}") if past else [None] * len(paths)
    held = _may_hold(actions, *holding) if holding else [True] * len(paths)
    root = where.uri.rstrip("/")
    return [f"{root}/{path}" for path, lo, hi, tie, may in zip(paths, smallest, largest, ties,
                                                               held)
            if may and not (low is not None and hi is not None and hi < low)
            and not (high is not None and lo is not None and lo > high)
            and not (past and hi == low and tie is not None and tie <= past[1])]


def _may_hold(actions: "pa.Table", column: str, value: str) -> list[bool]:
    """Per file, whether its statistics leave room for `value` in `column`."""
    return [not (nulls is not None and nulls == records)
            and not (least is not None and least > value)
            and not (greatest is not None and greatest < value)
            for nulls, records, least, greatest in zip(
                statistic(actions, f"null_count.{column}"), statistic(actions, "num_records"),
                statistic(actions, f"min.{column}"), statistic(actions, f"max.{column}"))]


def statistic(actions: "pa.Table", name: str) -> list[int | None]:
    """One statistic of every file in a table's add actions (`min.<column>`,
    `max.<column>`), None for each where the log has none."""
    return actions.column(name).to_pylist() if name in actions.column_names \
        else [None] * actions.num_rows


def read_delta(where: Where, columns: list[str] | None = None,
               filter: "pc.Expression | None" = None) -> "pa.Table":
    """A Delta table (or some columns of it) as Arrow.

    delta-rs lists the table's current files; pyarrow reads them: from the disk, or from
    the bytes obstore fetches on a store. delta-rs's own scans (to_pyarrow_table, and
    to_pyarrow_dataset whose files pyarrow reads through delta-rs's filesystem) now and
    then abort the interpreter at exit with deltalake 1.6 ("terminate called without an
    active exception"): measured 1 in 60 runs locally against 0 in 150 this way, and
    seen on S3 too. Partitioned tables (which this project does not write) still need
    delta-rs's dataset, and tables with deletion vectors (silver's) its own engine.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    where = location(where)
    table = where.open()
    schema = pa.schema(table.schema())
    if "deletionVectors" in (table.protocol().reader_features or []):
        # Silver and tombstone tables: pyarrow would return the rows a deletion vector
        # removed; delta-rs's own engine applies them.
        rows = pa.RecordBatchReader.from_stream(
            table.scan(columns=columns if filter is None else None)).read_all()
        rows = rows.cast(pa.schema([schema.field(name) for name in rows.column_names]))
        rows = rows if filter is None else rows.filter(filter)
        return rows.select(columns) if columns is not None else rows
    if table.metadata().partition_columns:
        dataset = table.to_pyarrow_dataset()
    elif storage.store_kind(where.uri):
        parts = [read_data_file(where, uri, schema) for uri in table.file_uris()]
        dataset = ds.dataset(parts or schema.empty_table())
    else:
        dataset = ds.dataset(table.file_uris(), format="parquet", schema=schema)
    return dataset.to_table(columns=columns, filter=filter, use_threads=False)


def read_data_file(where: Where, uri: str, schema: "pa.Schema",
                   columns: list[str] | None = None) -> "pa.Table":
    """One data file of a table without partitions or deletion vectors (its URI as
    delta-rs lists it), read by pyarrow: from the disk, or from the bytes obstore fetches
    on a store (see read_delta for why not through delta-rs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = location(where)
    if not storage.store_kind(where.uri):
        return pq.read_table(uri, schema=schema, columns=columns)
    import obstore

    files = storage.object_store(where.uri, dict(where.options))
    prefix = where.uri.rstrip("/") + "/"
    data = obstore.get(files, uri[len(prefix):]).bytes()
    return pq.read_table(pa.BufferReader(data), schema=schema, columns=columns)
