"""What the Ray test's write tasks import (Ray's workers find it on PYTHONPATH): the records as
a function of their id, and a sink whose chosen task kills its own worker mid-write once."""

from __future__ import annotations

import os
import signal
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

import zrecord.ray

SCHEMA = {"id": ("i64", ()), "emb": ("u8", (8,)), "text": "bytes"}


def emb(ids: np.ndarray) -> np.ndarray:
    """Record i's `emb`: 8 bytes, a function of i."""
    return ((ids.reshape(-1, 1) * 7 + np.arange(8)) % 251).astype(np.uint8)


def text(i: int) -> bytes:
    """Record i's `text`: 0 to 4 repetitions of its name (some empty)."""
    return f"record {i};".encode() * (i % 5)


def to_records(batch: dict[str, np.ndarray]) -> pa.Table:
    """A Ray `map_batches` function: ids in, the records' Arrow columns out."""
    ids = np.asarray(batch["id"], dtype=np.int64)
    e = emb(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(e.ravel(), pa.uint8()), 8),
            "text": pa.array([text(int(i)) for i in ids], pa.binary()),
        }
    )


class KillingDatasink(zrecord.ray.Datasink):
    """A `zrecord.ray.Datasink` whose task `kill_task` SIGKILLs its worker after appending its
    first block, the first time only (the marker file is created exclusively), so Ray retries
    the task in a new worker."""

    def __init__(self, *args: Any, kill_task: int, marker: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kill_task = kill_task
        self.marker = marker

    def write(self, blocks: Iterable[Any], ctx: Any) -> Any:
        if int(ctx.task_idx) != self.kill_task:
            return super().write(blocks, ctx)

        def killing() -> Iterable[Any]:
            it = iter(blocks)
            for block in it:
                yield block
                # The writer asks for the next block: the first is appended, nothing committed.
                try:
                    fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
                yield from it
                return

        return super().write(killing(), ctx)
