"""Type stubs of the extension module ``zrecord._zrecord`` (checked with ``mypy.stubtest``)."""

from __future__ import annotations

import os
import types
from typing import Any, Callable, Generic, Iterator, Self, Sequence, TypeVar, final, overload

import numpy as np
import numpy.typing as npt

__version__: str
__all__ = [
    "Batch",
    "Buffer",
    "ChecksumError",
    "ChunkGoneError",
    "ConfigError",
    "CorruptError",
    "Dataset",
    "Error",
    "Field",
    "FieldKindError",
    "IOError",
    "InternalError",
    "Loader",
    "Mix",
    "NotADatasetError",
    "Op",
    "PublishConflict",
    "Ragged",
    "RemoteError",
    "ResumeMismatch",
    "SchemaError",
    "TransformError",
    "Writer",
    "WriterBusyError",
    "__version__",
    "_batch",
    "_local_path",
    "_op",
    "_py_op",
    "_reopen",
    "commit_collection",
    "convert_images",
    "convert_npy",
    "convert_webdataset",
    "gc_collection",
    "mix",
    "open",
    "pull",
    "push",
]

_Path = str | os.PathLike[str]
# One index (an int or a NumPy integer: a batch of one record), a sequence of ints, or a 1-D
# integer array. Bools (a mask to NumPy), floats, bytes and strings raise TypeError.
_Indices = int | np.integer[Any] | Sequence[int] | npt.NDArray[np.integer[Any]]
_Fields = str | Sequence[str]
# What a Loader's next() returns: a Batch, or what its collate returns.
_T = TypeVar("_T")

class Error(Exception): ...
class CorruptError(Error): ...
class ChecksumError(CorruptError):
    path: str
    field: str
    index: int
    offset: int
    expected: int
    actual: int

class NotADatasetError(Error):
    path: str
    reason: str

class SchemaError(Error, ValueError):
    """A schema, field, dtype, shape or value that does not fit (also a ``ValueError``)."""
    field: str
    reason: str
    # A value given to a writer (append, append_batch, modify): the record and the first
    # element that does not fit (None where no one element is to blame, e.g. a shape).
    index: int
    value: Any
    # Arrow data (Writer.append_arrow), where they apply:
    column: str
    arrow_type: str
    dtype: str
    missing: list[str]
    extra: list[str]
    duplicated: list[str]
    row: int
    # An input of convert_images / convert_webdataset that is not a readable image, or a
    # shard that cannot be converted: the file (or shard) and the tar member, if any.
    path: str
    member: str | None
class ConfigError(Error):
    reason: str
    # A part given to a collection, where they apply:
    part: str
    path: str
    collection: str
    target: str

class ResumeMismatch(Error):
    reason: str

class WriterBusyError(Error):
    path: str

class IOError(Error, OSError):
    """A file operation that failed (also an ``OSError``)."""
    path: str
    op: str

class FieldKindError(Error, TypeError):
    """A field read as the other kind (also a ``TypeError``): ``Batch.array`` of a
    variable-length field, or ``Batch.ragged`` of a fixed-shape one."""
    field: str
    # What the call reads and what the field is: "array" or "ragged".
    expected: str
    actual: str
class ChunkGoneError(Error):
    path: str

class RemoteError(Error):
    url: str
    range: tuple[int, int] | None
    status: int | None
    reason: str

class PublishConflict(RemoteError): ...
class InternalError(Error): ...

class TransformError(Error):
    """An operation of a Loader's ``transform=`` failed on one record."""
    field: str
    index: int
    op: str
    reason: str

@final
class Op:
    """One operation of a field's transform (made by ``zrecord.transform``'s functions)."""
    @property
    def name(self) -> str: ...

# A field's transform: one operation or a list, each a zrecord.transform op or a callable fn(x).
_Transform = dict[str, Op | Callable[[Any], Any] | Sequence[Op | Callable[[Any], Any]]]

def _op(kind: str, args: dict[str, Any]) -> Op: ...
def _py_op(f: Callable[..., Any], random: bool, name: str | None = None) -> Op: ...

@final
class Buffer:
    """Rust memory that NumPy arrays of a batch view (their ``base``)."""
    def __len__(self) -> int: ...
    @property
    def zero_copy(self) -> bool: ...
    @property
    def writable(self) -> bool: ...

@final
class Ragged:
    """Variable-length values: ``values`` end to end, ``offsets`` (n + 1 int64)."""
    def __new__(cls, values: Any, offsets: Any) -> Ragged: ...
    @property
    def values(self) -> npt.NDArray[Any]: ...
    @property
    def offsets(self) -> npt.NDArray[np.int64]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, j: int, /) -> npt.NDArray[Any]: ...
    def to_list(self) -> list[npt.NDArray[Any]]: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class Batch:
    """One gathered batch: ``b.array(field)`` is a fixed-shape field's array ``(n, *shape)``,
    ``b.ragged(field)`` a variable-length field's ``Ragged``; ``b[field]`` is either."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: str, /) -> npt.NDArray[Any] | Ragged: ...
    def array(self, name: str) -> npt.NDArray[Any]:
        """The fixed-shape field ``name``'s array, ``(n, *shape)`` of its dtype (the object
        ``b[name]`` returns). ``KeyError`` for an unknown field, ``FieldKindError`` for a
        variable-length one."""
    def ragged(self, name: str) -> Ragged:
        """The variable-length field ``name``'s ``Ragged`` (the object ``b[name]`` returns).
        ``KeyError`` for an unknown field, ``FieldKindError`` for a fixed-shape one."""
    def __contains__(self, key: object, /) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def keys(self) -> list[str]: ...
    def items(self) -> list[tuple[str, npt.NDArray[Any] | Ragged]]: ...
    def to_dict(self) -> dict[str, npt.NDArray[Any] | Ragged]: ...
    @property
    def fields(self) -> list[str]: ...
    @property
    def indices(self) -> npt.NDArray[np.int64]: ...
    @property
    def is_pad(self) -> npt.NDArray[np.bool_]: ...
    @property
    def epoch(self) -> int | None: ...
    @property
    def position(self) -> int | None: ...
    @property
    def nbytes(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def _batch(
    names: Sequence[str],
    dtypes: Sequence[str],
    shapes: Sequence[Sequence[int] | None],
    arrays: Sequence[npt.NDArray[Any] | Ragged],
    indices: Sequence[int],
    is_pad: Sequence[bool] | None,
    epoch: int | None,
    position: int | None,
) -> Batch: ...

@final
class Field:
    def __new__(
        cls, name: str, dtype: Any, shape: Sequence[int] | None = None, codec: str = "raw"
    ) -> Field: ...
    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> list[int] | None: ...
    @property
    def codec(self) -> str: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class Dataset:
    def __new__(
        cls,
        path: _Path,
        *,
        backend: str | None = None,
        verify: bool = True,
        direct: bool = False,
        cache_bytes: int | None = None,
        cache_dir: _Path | None = None,
        lookahead_bytes: int | None = None,
        storage_options: dict[str, Any] | None = None,
        copy_mapped: bool = True,
    ) -> Dataset: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def attributes(self) -> dict[str, Any]: ...
    @property
    def generation(self) -> int: ...
    @property
    def fields(self) -> list[str]: ...
    @property
    def schema(self) -> list[Field]: ...
    @property
    def backend(self) -> str: ...
    def refresh(self) -> bool: ...
    def take(self, indices: _Indices, *, fields: _Fields | None = None) -> Batch: ...
    def __getitem__(self, index: int | np.integer[Any], /) -> dict[str, npt.NDArray[Any]]: ...
    def __getitems__(self, indices: _Indices, /) -> list[dict[str, npt.NDArray[Any]]]: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def open(
    path: _Path,
    *,
    backend: str | None = None,
    verify: bool = True,
    direct: bool = False,
    cache_bytes: int | None = None,
    cache_dir: _Path | None = None,
    lookahead_bytes: int | None = None,
    storage_options: dict[str, Any] | None = None,
    copy_mapped: bool = True,
) -> Dataset: ...
def _reopen(path: str, options: dict[str, Any]) -> Dataset: ...
def _local_path(name: str) -> str | None:
    """The local path ``name`` names (itself, or what follows ``file://``), or ``None`` for an
    object store's URL (``s3://…``, ``gs://…``, ``az://…``): zrecord's one rule."""

@final
class Mix: ...

def mix(
    datasets: Sequence[Dataset],
    weights: Sequence[float],
    *,
    exhausted: str = "restart",
    mode: str = "shuffled",
    epochs: int | None = None,
    epoch_len: int | None = None,
    part_epochs: int | None = None,
) -> Mix: ...

@final
class Loader(Generic[_T]):
    """Batches of a dataset or a mix: ``next()`` returns a ``Batch``, or with ``collate`` what
    ``collate`` returns (``Loader[Batch]`` or ``Loader[T]`` to a type checker). ``collate`` runs
    on the thread calling ``next()``, or with ``collate_in_workers=True`` on the loader's worker
    threads, in parallel across batches (each call holding the GIL while it runs)."""
    @overload
    def __new__(
        cls,
        source: Dataset | Mix,
        *,
        batch_size: int = 256,
        shuffle: bool = True,
        sampler: str | None = None,
        seed: int = 0,
        epochs: int | None = ...,
        shard: tuple[int, int] | None = None,
        shard_mode: str = "interleaved",
        pad_to_equal: bool = False,
        drop_remainder: bool = False,
        workers: int = 2,
        merge: str = "strict",
        max_lead: int | None = None,
        max_skips_per_round: int | None = None,
        bucket: int | dict[str, int] | None = None,
        drop_last: bool = False,
        lookahead: int | None = None,
        gathers_in_flight: int | None = None,
        worker_queue_size: int | None = None,
        consumer_queue_size: int | None = None,
        retries: int | None = None,
        retry_backoff: float | None = None,
        on_error: str = "raise",
        fields: _Fields | None = None,
        key_field: str | None = None,
        state: dict[str, Any] | str | None = None,
        resume_from: Sequence[dict[str, Any] | str] | None = None,
        collate: None = None,
        transform: _Transform | None = None,
        collate_in_workers: bool = False,
    ) -> Loader[Batch]: ...
    @overload
    def __new__(
        cls,
        source: Dataset | Mix,
        *,
        batch_size: int = 256,
        shuffle: bool = True,
        sampler: str | None = None,
        seed: int = 0,
        epochs: int | None = ...,
        shard: tuple[int, int] | None = None,
        shard_mode: str = "interleaved",
        pad_to_equal: bool = False,
        drop_remainder: bool = False,
        workers: int = 2,
        merge: str = "strict",
        max_lead: int | None = None,
        max_skips_per_round: int | None = None,
        bucket: int | dict[str, int] | None = None,
        drop_last: bool = False,
        lookahead: int | None = None,
        gathers_in_flight: int | None = None,
        worker_queue_size: int | None = None,
        consumer_queue_size: int | None = None,
        retries: int | None = None,
        retry_backoff: float | None = None,
        on_error: str = "raise",
        fields: _Fields | None = None,
        key_field: str | None = None,
        state: dict[str, Any] | str | None = None,
        resume_from: Sequence[dict[str, Any] | str] | None = None,
        collate: Callable[[Batch], _T],
        transform: _Transform | None = None,
        collate_in_workers: bool = False,
    ) -> Loader[_T]: ...
    def __class_getitem__(cls, item: Any, /) -> types.GenericAlias: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> _T: ...
    def _unget(self, batch: _T) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...
    @property
    def batch_size(self) -> int: ...

@final
class Writer:
    @staticmethod
    def create(
        path: _Path,
        schema: dict[str, Any] | Sequence[Field],
        *,
        chunk_size_bytes: int | None = None,
        num_writers: int | None = None,
    ) -> Writer: ...
    @staticmethod
    def open(path: _Path, *, num_writers: int | None = None) -> Writer: ...
    def append(self, record: dict[str, Any]) -> int: ...
    def append_batch(self, batch: dict[str, Any]) -> tuple[int, int]: ...
    def append_arrow(self, data: Any) -> tuple[int, int]:
        """Appends Arrow data (anything with ``__arrow_c_stream__`` or ``__arrow_c_array__``: a
        pyarrow Table, RecordBatch or RecordBatchReader, a polars DataFrame, a struct array),
        one record per row; returns ``(start, stop)``. Columns match fields by name; a null is
        an absent value; a misfit raises ``SchemaError`` naming the column."""
    def modify(self, index: int | np.integer[Any], field: str, value: Any) -> None: ...
    def delete(self, index: int | np.integer[Any]) -> None: ...
    def train_dictionary(self, field: str, samples: Sequence[bytes]) -> int: ...
    def rebalance(self, *, retrain_dictionaries: bool = False) -> dict[str, int]: ...
    def commit(self) -> int: ...
    def set_attribute(self, key: str, value: Any) -> None: ...
    def remove_attribute(self, key: str) -> None: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    def __enter__(self) -> Writer: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> bool: ...

def push(
    path: _Path,
    url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    concurrency: int | None = None,
    single_writer: bool = False,
) -> dict[str, Any]: ...
def pull(
    url: str,
    path: _Path,
    *,
    storage_options: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> dict[str, Any]: ...
def commit_collection(
    root: _Path,
    parts: Sequence[_Path],
    *,
    storage_options: dict[str, Any] | None = None,
    single_writer: bool = False,
) -> dict[str, Any]:
    """Commits ``parts`` into the collection at ``root`` (a directory or an object-store URL)
    in the order given; returns ``number``, ``ids``, ``added``, ``parts``, ``len``,
    ``attempts``."""
    ...
def gc_collection(
    root: _Path,
    older_than: float,
    *,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Removes the parts of the collection at ``root`` that no manifest names and that are older
    than ``older_than`` seconds; returns ``removed``, ``kept``, ``bytes_freed``, ``leftovers``,
    ``manifests``."""
    ...
def convert_images(
    dir: _Path,
    out: _Path,
    *,
    max_side: int | None = None,
    quality: int = 90,
    skip_bad: bool = False,
    shuffle_seed: int | None = None,
    codec: str = "raw",
    chunk_size_bytes: int | None = None,
    num_threads: int = 2,
    commit_every: int | None = None,
) -> dict[str, Any]: ...
def convert_webdataset(
    shards: Sequence[_Path],
    out: _Path,
    *,
    max_side: int | None = None,
    quality: int = 90,
    skip_bad: bool = False,
    codec: str = "raw",
    chunk_size_bytes: int | None = None,
    num_threads: int = 2,
    commit_every: int | None = None,
) -> dict[str, Any]: ...
def convert_npy(
    inputs: Sequence[_Path],
    out: _Path,
    *,
    field_names: Sequence[str] | None = None,
    codec: str = "raw",
    chunk_size_bytes: int | None = None,
) -> tuple[int, int]: ...
