"""Read slots: what the driver plans for a micro-batch when executors read the broker.

A micro-batch's plan is written into its end offset, so Spark's offset log holds it:
``{"batch": n, "run": R, "slots": [s0, s1, ...]}``. ``R`` is the id of the reader that planned
it (one per query start) and ``s_i`` the most messages slot ``i`` may take. Slot ``i``'s
reservation tag is a hash of (queue, R, n, i): any process that has the offset can name every
reservation of the batch, which is how the driver renews and acks what executors took without
ever seeing a body, and how a batch Spark replays after a restart finds what the dead run's
tasks took for it. A flush batch has no slots.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import InputPartition

from babelq.transports.base import TAG_LENGTH


def new_run() -> str:
    """The id of one reader instance (one query start): 32 hex characters."""
    return uuid.uuid4().hex


def slot_tag(queue: str, run: str, batch: int, slot: int) -> str:
    """The reservation tag of slot ``slot`` of micro-batch ``batch`` planned by run ``run``."""
    digest = hashlib.sha256(f"babelq-slot\n{queue}\n{run}\n{batch}\n{slot}".encode()).hexdigest()
    return digest[:TAG_LENGTH]


def shares(total: int, partitions: int, per_partition: int) -> tuple[int, ...]:
    """``total`` messages cut into slots: at least ``partitions`` (never more than ``total``), more
    when a slot would exceed ``per_partition``; sizes differ by at most one, largest first."""
    if total <= 0:
        return ()
    count = min(total, max(partitions, -(-total // per_partition)))
    size, extra = divmod(total, count)
    return tuple(size + 1 if i < extra else size for i in range(count))


@dataclass(frozen=True, slots=True)
class Plan:
    """One micro-batch as planned: its number, the run that planned it and each slot's share."""

    batch: int
    run: str
    shares: tuple[int, ...]  # empty: a flush batch, which reads nothing

    def offset(self) -> dict[str, Any]:
        return {"batch": self.batch, "run": self.run, "slots": list(self.shares)}

    @classmethod
    def from_offset(cls, offset: dict[str, Any]) -> Plan | None:
        """The plan an end offset carries; None for an offset without one (``{"batch": n}``:
        written by the driver-side reader, or by babelq before executors read)."""
        run, slots = offset.get("run"), offset.get("slots")
        if not isinstance(run, str) or not isinstance(slots, list):
            return None
        return cls(int(offset.get("batch", 0)), run, tuple(int(s) for s in slots))

    def tags(self, queue: str) -> list[str]:
        return [slot_tag(queue, self.run, self.batch, i) for i in range(len(self.shares))]


def logged_plan(checkpoint: str | Path, batch: int) -> Plan | None:
    """The plan of Spark's micro-batch ``batch`` (its ``batchId``) as the offset log in the local
    checkpoint directory ``checkpoint`` holds it (``offsets/<batch>``: a version line, the batch's
    metadata, then the end offset of each source); None when the file cannot be read or holds no
    plan (a driver-read source, a checkpoint on a remote file system). A sink that settles a
    batch's messages itself can ack them by the plan's tags without waiting for Spark's next
    batch to commit the source."""
    folder = str(checkpoint)
    if folder.startswith("file:"):  # Spark's own spelling of a local path
        folder = "/" + folder[len("file:"):].lstrip("/")
    try:
        lines = (Path(folder) / "offsets" / str(int(batch))).read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        plan = Plan.from_offset(offset) if isinstance(offset, dict) else None
        if plan is not None:  # (its own number counts from 1: Spark's batch 0 ends at offset 1)
            return plan
    return None


class ReadSlot(InputPartition):
    """An input partition that carries no bodies: the executor reserves up to ``share`` messages
    under ``tag`` itself (and gets the same ones back if the task is retried)."""

    def __init__(self, tag: str, share: int, batch_id: int) -> None:
        super().__init__(tag)
        self.tag = tag
        self.share = share
        self.batch_id = batch_id
