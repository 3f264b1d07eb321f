"""Corrupt bytes raise a typed exception naming the file, field, index and offset; a panic never
crosses into Python; bad arguments are ValueError/IndexError/KeyError."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import zrecord
from conftest import BACKENDS


def _corrupt_first_chunk(path: Path, at: int) -> Path:
    chunk = sorted((path / "chunk").iterdir())[0]
    with open(chunk, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return chunk


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flipped_byte_is_a_checksum_error(small, backend):
    chunk = _corrupt_first_chunk(small, 10)
    ds = zrecord.open(small, backend=backend)
    with pytest.raises(zrecord.ChecksumError) as e:
        ds.take(np.arange(10))
    err = e.value
    assert isinstance(err, zrecord.CorruptError) and isinstance(err, zrecord.Error)
    assert err.path == str(chunk)
    assert err.field in ("image", "label", "tokens")
    assert isinstance(err.index, int) and isinstance(err.offset, int)
    assert err.offset <= 10
    assert "checksum" in str(err)
    # Checksums off: the bytes come back as they are (the caller asked for that).
    raw = zrecord.open(small, backend=backend, verify=False)
    assert len(raw.take(np.arange(10))) == 10


def test_a_loader_raises_the_checksum_error_and_its_state_points_at_the_batch(small):
    _corrupt_first_chunk(small, 10)
    ds = zrecord.open(small)
    loader = zrecord.Loader(ds, batch_size=10, shuffle=False, workers=1, retries=0)
    with pytest.raises(zrecord.ChecksumError):
        next(iter(loader))
    # The checkpoint still points at the failed batch: a loader resumed from it tries the same
    # records first (and fails the same way until the chunk is repaired).
    state = loader.state_dict()
    resumed = zrecord.Loader(ds, batch_size=10, shuffle=False, workers=1, retries=0, state=state)
    with pytest.raises(zrecord.ChecksumError) as again:
        next(iter(resumed))
    assert again.value.path == e_path(ds)


def e_path(ds) -> str:
    return str(sorted((__import__("pathlib").Path(ds.path) / "chunk").iterdir())[0])


def test_not_a_dataset(tmp_path):
    with pytest.raises(zrecord.NotADatasetError) as e:
        zrecord.open(tmp_path / "nothing")
    assert "nothing" in e.value.path


def test_a_garbled_meta_is_a_corrupt_error(small):
    (small / "meta.json").write_text("{ not json")
    with pytest.raises((zrecord.CorruptError, zrecord.NotADatasetError)) as e:
        zrecord.open(small)
    assert "meta.json" in str(e.value) or "small.zr" in e.value.path


def test_bad_options_are_config_errors(small):
    with pytest.raises(zrecord.ConfigError):
        zrecord.open(small, backend="floppy")
    ds = zrecord.open(small)
    with pytest.raises(ValueError):
        zrecord.Loader(ds, merge="sometimes")
    with pytest.raises(zrecord.ResumeMismatch):
        zrecord.Loader(ds, state={"not": "a state"})


def test_a_bad_schema_is_a_schema_error(tmp_path):
    with pytest.raises(ValueError):
        zrecord.Writer.create(tmp_path / "a.zr", {"x": "complex128"})
    with pytest.raises(zrecord.SchemaError):
        zrecord.Writer.create(tmp_path / "b.zr", {"bad name!": "u8"})
