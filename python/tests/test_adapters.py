"""The torch and Grain adapters keep the loader's guarantees: the torch IterableDataset resumes
exactly from its state_dict (checked without torch installed too: the adapter then yields
arrays), and the Grain data source answers Grain's protocol with the dataset's records."""

from __future__ import annotations

import json
import pickle

import numpy as np

import zrecord
import zrecord.grain
import zrecord.torch
from conftest import image


def _indices(item) -> list[int]:
    return [int(i) for i in np.asarray(item["indices"])]


def test_torch_iterable_dataset_resumes_exactly(seq_dataset):
    options = dict(batch_size=32, shuffle=True, seed=4, epochs=1, workers=2)
    data = zrecord.torch.IterableDataset(str(seq_dataset), **options)
    whole, state = [], None
    for k, item in enumerate(data):
        whole.append(_indices(item))
        assert set(item) == {"x", "indices", "is_pad"}
        if k == 9:
            state = json.loads(json.dumps(data.state_dict()))
    again = zrecord.torch.IterableDataset(zrecord.open(seq_dataset), **options)
    again.load_state_dict(state)
    assert [_indices(i) for i in again] == whole[10:]


def test_grain_data_source_protocol(small):
    src = zrecord.grain.DataSource(str(small))
    assert len(src) == 200
    rec = src[7]
    np.testing.assert_array_equal(rec["image"], image(7))
    recs = src.__getitems__([3, 199, 3])
    assert [int(r["label"][0]) for r in recs] == [3, 199, 3]
    assert "200 records" in repr(src)
    again = pickle.loads(pickle.dumps(src))
    np.testing.assert_array_equal(again[5]["image"], image(5))


def test_torch_passes_are_epochs_of_one_loader(seq_dataset):
    data = zrecord.torch.IterableDataset(str(seq_dataset), batch_size=100, shuffle=True, seed=2, epochs=3, workers=2)
    passes = [[i for item in data for i in _indices(item)] for _ in range(4)]
    assert [sorted(p) for p in passes[:3]] == [list(range(1000))] * 3
    assert passes[0] != passes[1] != passes[2]  # each epoch its own order
    assert passes[3] == []
    # A checkpoint at an epoch boundary resumes with the next epoch.
    again = zrecord.torch.IterableDataset(str(seq_dataset), batch_size=100, shuffle=True, seed=2, epochs=3, workers=2)
    first = [i for item in again for i in _indices(item)]
    state = json.loads(json.dumps(again.state_dict()))
    resumed = zrecord.torch.IterableDataset(str(seq_dataset), batch_size=100, shuffle=True, seed=2, epochs=3, workers=2)
    resumed.load_state_dict(state)
    assert first == passes[0]
    assert [i for item in resumed for i in _indices(item)] == passes[1]


def test_pad_stack_and_a_collate(small):
    ds = zrecord.open(small)
    b = ds.take([0, 6, 13, 2])
    padded, mask = zrecord.pad_stack(b["tokens"], pad_value=-1)
    lengths = [0, 6, 6, 2]  # tokens(i) has i % 7 values
    assert padded.shape == (4, 6) and mask.shape == (4, 6) and mask.dtype == np.uint8
    assert mask.sum(axis=1).tolist() == lengths
    for row, i in enumerate([0, 6, 13, 2]):
        n = lengths[row]
        assert padded[row, :n].tolist() == list(range(i * 100, i * 100 + n))
        assert (padded[row, n:] == -1).all()
    left, lmask = zrecord.pad_stack(b["tokens"], side="left", multiple_of=4)
    assert left.shape == (4, 8) and lmask[:, -1].tolist() == [0, 1, 1, 1]
    # A collate runs on the consuming thread, and the loader hands out its result.
    seen = []

    def collate(batch):
        seen.append(len(batch))
        return zrecord.pad_stack(batch["tokens"])

    loader = zrecord.Loader(ds, batch_size=50, shuffle=False, workers=2, collate=collate)
    out = list(loader)
    assert len(out) == 4 and all(isinstance(p, tuple) for p in out) and seen == [50] * 4
