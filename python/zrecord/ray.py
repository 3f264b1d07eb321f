"""Ray Data sink: many write tasks build one zrecord collection, committed once.

::

    import ray, zrecord.ray

    ds = ray.data.read_parquet("s3://bucket/raw/")
    sink = zrecord.ray.Datasink("s3://bucket/train", {"tokens": "i32", "label": ("i64", [1])},
                                storage_options={...})
    ds.write_datasink(sink)
    train = zrecord.open("s3://bucket/train", storage_options={...})

Each write task writes one part: its blocks go through :meth:`zrecord.Writer.append_arrow`
(the Arrow buffers are read in place) into a dataset of its own, which for an ``s3://``,
``gs://`` or ``az://`` collection is pushed to ``<url>/parts/<id>`` and for a local collection
is written straight into ``<root>/parts/<id>``. When every task has finished,
``on_write_complete`` commits the parts in one manifest, in task order (not finish order), so
the collection's record order is the input's.

A task that dies and is retried by Ray writes a new part under a new id; the dead attempt's
part is never committed (only parts a finished task returned are), so every input row is in the
collection exactly once. What a dead attempt left under ``parts/`` is removed by
``zrecord gc ROOT --older-than DURATION``. A part is protected from ``gc`` only by that limit
between its task's push and the driver's commit (on an object store, and locally while no
writer holds it): ``DURATION`` must exceed the longest write job. A write that fails as a whole
commits nothing.

For an object-store collection each task writes its part into a local scratch directory,
``<tempdir>/zrecord-ray-scratch/<hash of the url>/<part id>/``, beside a lock file
``<part id>.lock`` that the task holds (an OS file lock: it is released when the process dies,
SIGKILL included) until the part is pushed and the directory removed. Each new write task, and
``on_write_complete``, removes the scratch directories of that collection whose lock is free: a
killed attempt's scratch does not outlive the next write on the same host.

A write of no rows at all into a new collection commits one empty part (a dataset of no records
with the sink's schema): the collection exists and reads as an empty dataset. Into an existing
collection it adds nothing and creates no manifest.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from . import _zrecord

try:  # ray is optional: importing this module without it fails only when used.
    from ray.data import Datasink as _RayDatasink
    from ray.data.block import BlockAccessor as _BlockAccessor
except ImportError:  # pragma: no cover - exercised only without ray
    _RayDatasink = object
    _BlockAccessor = None


def _is_url(root: str) -> bool:
    """Whether ``root`` names an object store's prefix, by the rule every zrecord call follows
    (``zrecord::remote::local_path``): ``scheme://…`` is a URL, but not ``file://…``."""
    return _zrecord._local_path(root) is None


SCRATCH_DIR = "zrecord-ray-scratch"
"""The folder under the temporary directory that holds every collection's scratch parts."""

SCRATCH_GRACE_SECONDS = 300.0
"""A scratch entry without a lock file (a writer killed between creating its lock under a
temporary name and renaming it into place) is removed once it is this old."""


def scratch_parent(url: str, tmpdir: str | None = None) -> str:
    """The folder holding the scratch parts of the collection at ``url`` on this host."""
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(tmpdir or tempfile.gettempdir(), SCRATCH_DIR, digest)


class _Scratch:
    """One write task's scratch directory ``<parent>/<id>/``, and its lock ``<parent>/<id>.lock``
    held from before the directory exists until after it is removed. The lock file is created
    and locked under a temporary name, then renamed into place, so a visible lock file is
    always locked while its writer lives."""

    def __init__(self, parent: str, part_id: str) -> None:
        os.makedirs(parent, exist_ok=True)
        self.dir = os.path.join(parent, part_id)
        self.lock_path = self.dir + ".lock"
        tmp = f"{self.lock_path}.{os.getpid()}.tmp"
        self._fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(tmp, self.lock_path)
            os.mkdir(self.dir)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Removes the directory, then the lock file, then releases the lock."""
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.unlink(self.lock_path)
        except FileNotFoundError:
            pass
        os.close(self._fd)


def clean_scratch(parent: str, grace_seconds: float = SCRATCH_GRACE_SECONDS) -> list[str]:
    """Removes the scratch parts under ``parent`` whose writer is gone (its lock file is not
    locked), and entries without a lock file older than ``grace_seconds``. Returns the part ids
    removed. A live writer's scratch is never removed: it holds its lock."""
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return removed
    now = time.time()
    for name in sorted(names):
        path = os.path.join(parent, name)
        if name.endswith(".lock"):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue  # its writer finished meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer
                part = path[: -len(".lock")]
                shutil.rmtree(part, ignore_errors=True)
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                removed.append(os.path.basename(part))
            finally:
                os.close(fd)
            continue
        if name.endswith(".tmp") or not os.path.exists(path + ".lock"):
            try:
                age = now - os.lstat(path).st_mtime
            except FileNotFoundError:
                continue
            if age > grace_seconds and not os.path.exists(path + ".lock"):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                removed.append(name)
    return removed


@dataclass(frozen=True)
class WrittenPart:
    """What one write task returns: its task index, the part (a path or URL), its records."""

    task: int
    part: str | None
    records: int


def _schema_of(schema: Mapping[str, Any] | Sequence[Any]) -> Any:
    """A picklable copy of ``schema`` (``Field`` objects become tuples)."""
    if isinstance(schema, Mapping):
        return dict(schema)
    out = []
    for f in schema:
        if isinstance(f, _zrecord.Field):
            out.append((f.name, f.dtype, f.shape, f.codec))
        else:
            out.append(tuple(f))
    return out


def _fields(schema: Any) -> Any:
    if isinstance(schema, dict):
        return schema
    return [_zrecord.Field(name, dtype, shape, codec) for (name, dtype, shape, codec) in schema]


class Datasink(_RayDatasink):  # type: ignore[misc,valid-type]
    """A Ray Data ``Datasink`` that writes a zrecord collection at ``url``.

    ``url`` is a local directory or an object-store URL; ``schema`` is what
    :meth:`zrecord.Writer.create` takes (a dict of ``name: dtype`` or ``name: (dtype, shape)``,
    or a list of :class:`zrecord.Field`). Columns of the written blocks match fields by name
    (a column no field names is a ``SchemaError``). ``storage_options`` are the object store's
    (as for :func:`zrecord.open`); ``chunk_size_bytes`` is the parts' chunk size.

    After ``write_datasink`` returns, :attr:`report` holds the commit's report (the manifest
    ``number``, the part ``ids`` in task order, ``len``).
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        schema: Mapping[str, Any] | Sequence[Any],
        *,
        storage_options: Mapping[str, Any] | None = None,
        chunk_size_bytes: int | None = None,
    ) -> None:
        if _BlockAccessor is None:
            raise ImportError("zrecord.ray needs Ray Data: pip install 'ray[data]'")
        self.url = os.fspath(url)
        self.schema = _schema_of(schema)
        self.storage_options = dict(storage_options) if storage_options else None
        self.chunk_size_bytes = chunk_size_bytes
        self.report: dict[str, Any] | None = None

    def get_name(self) -> str:
        return "zrecord"

    def on_write_start(self, schema: Any = None) -> None:
        local = _zrecord._local_path(self.url)
        if local is not None:
            os.makedirs(os.path.join(local, "parts"), exist_ok=True)

    def write(self, blocks: Iterable[Any], ctx: Any) -> WrittenPart:
        return self._write_part(int(ctx.task_idx), blocks, keep_empty=False)

    def _write_part(self, task: int, blocks: Iterable[Any], *, keep_empty: bool) -> WrittenPart:
        """Writes ``blocks`` as one new part (pushed, for an object store); a part of no records
        is dropped unless ``keep_empty``."""
        # A new id per attempt: a retried task never collides with what its first attempt left.
        part_id = f"{task:06d}-{uuid.uuid4().hex[:16]}"
        scratch = None
        local = _zrecord._local_path(self.url)
        if local is None:
            parent = scratch_parent(self.url)
            clean_scratch(parent)
            scratch = _Scratch(parent, part_id)
            path = os.path.join(scratch.dir, part_id)
        else:
            path = os.path.join(local, "parts", part_id)
        try:
            records = 0
            kwargs: dict[str, Any] = {}
            if self.chunk_size_bytes is not None:
                kwargs["chunk_size_bytes"] = self.chunk_size_bytes
            with _zrecord.Writer.create(path, _fields(self.schema), **kwargs) as w:
                for block in blocks:
                    acc = _BlockAccessor.for_block(block)
                    if acc.num_rows() == 0:
                        continue
                    start, stop = w.append_arrow(acc.to_arrow())
                    records += stop - start
            if records == 0 and not keep_empty:
                shutil.rmtree(path, ignore_errors=True)
                return WrittenPart(task, None, 0)
            if scratch is not None:
                part = f"{self.url.rstrip('/')}/parts/{part_id}"
                _zrecord.push(path, part, storage_options=self.storage_options)
                return WrittenPart(task, part, records)
            return WrittenPart(task, path, records)
        finally:
            if scratch is not None:
                scratch.close()

    def on_write_complete(self, write_result: Any) -> None:
        # One part per task, in task order. Ray returns each finished task's value once; should
        # a task's value ever come twice (a re-executed task whose first output was lost), its
        # first part is taken and the other left out, so no row is committed twice.
        by_task: dict[int, WrittenPart] = {}
        for w in write_result.write_returns:
            if isinstance(w, WrittenPart):
                by_task.setdefault(w.task, w)
        parts = [by_task[t].part for t in sorted(by_task) if by_task[t].part is not None]
        if _is_url(self.url):
            # Every write task has finished: what is left of this collection's scratch on this
            # host is a killed attempt's (a later write's live tasks hold their locks).
            clean_scratch(scratch_parent(self.url))
        if not parts:
            try:
                # Into an existing collection: adds nothing, creates no manifest.
                self.report = commit_parts(self.url, [], storage_options=self.storage_options)
                return
            except _zrecord.ConfigError as e:
                if "at least one part" not in str(e):
                    raise
            # No rows at all, into a new collection (its schema comes from its first part):
            # one empty part, so the collection exists and reads as an empty dataset.
            empty = self._write_part(0, [], keep_empty=True).part
            parts = [empty] if empty is not None else []
        self.report = commit_parts(self.url, parts, storage_options=self.storage_options)


def commit_parts(
    url: str, parts: Sequence[str], *, storage_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Commits ``parts`` into the collection at ``url``, in the order given."""
    if _is_url(url):
        return _zrecord.commit_collection(
            url, list(parts), storage_options=dict(storage_options or {})
        )
    return _zrecord.commit_collection(url, list(parts))
