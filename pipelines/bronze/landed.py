"""What bronze/changes holds, read from its log alone (no data file, no Spark).

The ingest's confirmed progress is the Delta app transaction of the slot's name (the end
LSN of the last whole transaction landed); every commit also records the newest position
it holds (commit metadata POSITION_KEY, a lake position: the slot generation's offset
added), which the ingest resumes from and a silver run compares its progress with.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from deltalake.exceptions import TableNotFoundError

from pipelines.lake import TableLocation, Where, location
from pipelines.positions import Position

POSITION_KEY = "lakehouse.position"  # its value: "lsn:index"
HISTORY_LOOKBACK = 50  # commits read back for one that says (maintenance commits do not)


def position_metadata(position: Position) -> dict[str, str]:
    """The commit metadata recording `position` (a lake position)."""
    return {POSITION_KEY: f"{position[0]}:{position[1]}"}


def newest_landed(history: Iterable[Mapping[str, object]]) -> Position | None:
    """The newest position recorded in a bronze/changes log (`history`: its commits,
    newest first, as delta-rs' DeltaTable.history lists them); None when no commit
    says."""
    for commit in history:
        if POSITION_KEY in commit:
            lsn, index = (int(part) for part in str(commit[POSITION_KEY]).split(":"))
            return lsn, index
    return None


def newest_position(where: TableLocation) -> Position | None:
    """The newest position bronze/changes records (None: no commit says)."""
    return newest_landed(where.open().history(limit=HISTORY_LOOKBACK))


def landed_lsn(where: Where, app_id: str) -> int:
    """The end LSN of the last whole transaction bronze holds from slot `app_id` (0: none
    or no bronze yet)."""
    try:
        return location(where).open().transaction_version(app_id) or 0
    except TableNotFoundError:
        return 0
