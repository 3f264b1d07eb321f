"""zrecord: a record store and data loader for ML training.

Read a dataset at engine speed, one NumPy array per field per batch::

    import numpy as np, zrecord

    ds = zrecord.open("train.zr")                 # or "s3://bucket/prefix"
    b = ds.take(np.array([7, 3, 7]))              # caller order, checksummed
    b.array("image")                              # (3, *shape) array, zero-copy
    b.ragged("tokens")                            # variable length: a zrecord.Ragged
    loader = zrecord.Loader(ds, batch_size=256, shuffle=True, seed=17, workers=2)
    for batch in loader:                          # zrecord.Batch (a Loader[Batch])
        ...
    state = loader.state_dict()                   # JSON-serialisable; resume with state=

``b[name]`` is either kind (``ndarray | Ragged`` to a type checker); ``b.array`` and
``b.ragged`` are typed, and raise :class:`zrecord.FieldKindError` for the other kind.
Every call that reads, waits or writes releases the GIL. Errors are subclasses of
:class:`zrecord.Error` carrying the file, field, index and offset where they apply.
"""

from __future__ import annotations

from . import _zrecord, transform
from .collate import pad_stack
from ._zrecord import (
    Batch,
    Buffer,
    ChecksumError,
    ChunkGoneError,
    ConfigError,
    CorruptError,
    Dataset,
    Error,
    Field,
    FieldKindError,
    InternalError,
    IOError,
    Loader,
    Mix,
    NotADatasetError,
    PublishConflict,
    Ragged,
    RemoteError,
    ResumeMismatch,
    SchemaError,
    TransformError,
    Writer,
    WriterBusyError,
    __version__,
    commit_collection,
    convert_images,
    convert_npy,
    convert_webdataset,
    gc_collection,
    mix,
    open,
    pull,
    push,
)

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
    "InternalError",
    "IOError",
    "Loader",
    "Mix",
    "NotADatasetError",
    "PublishConflict",
    "Ragged",
    "RemoteError",
    "ResumeMismatch",
    "SchemaError",
    "TransformError",
    "Writer",
    "WriterBusyError",
    "__version__",
    "commit_collection",
    "convert_images",
    "convert_npy",
    "convert_webdataset",
    "gc_collection",
    "mix",
    "open",
    "pad_stack",
    "pull",
    "push",
    "transform",
]
