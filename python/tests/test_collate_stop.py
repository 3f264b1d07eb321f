"""A collate that raises StopIteration does not end the epoch silently (issue #30): the loader
raises RuntimeError from it (as a generator does, PEP 479), keeps the batch, and hands it out
on the next call."""

from __future__ import annotations

import pytest

import zrecord


def test_stop_iteration_from_a_collate_is_a_runtime_error(seq_dataset):
    ds = zrecord.open(seq_dataset)
    calls = []

    def collate(batch):
        calls.append(batch.position)
        if len(calls) == 2:
            raise StopIteration("a bug in the collate")
        return batch.indices.tolist()

    loader = zrecord.Loader(ds, batch_size=100, shuffle=False, workers=1, collate=collate)
    got = [next(loader)]
    with pytest.raises(RuntimeError, match="StopIteration") as e:
        next(loader)
    assert isinstance(e.value.__cause__, StopIteration)
    # The batch the collate failed on is the next one: nothing skipped, the epoch goes on.
    got += list(loader)
    assert calls == [0, 1, 1] + list(range(2, 10))
    assert [i for b in got for i in b] == list(range(1000))
