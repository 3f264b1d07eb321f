#!/usr/bin/env python3
"""Train a small PyTorch model on a zrecord dataset, stop mid-epoch, and resume exactly.

Run: python examples/python/train_torch.py [DIR]   (needs torch; writes a synthetic dataset
into DIR, default /tmp/zrecord-torch-example.zr). Prints records/s and checks that the resumed
run sees exactly the batches the uninterrupted one would have.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import zrecord
import zrecord.torch


def make(path: Path, n: int = 20_000) -> None:
    if path.exists():
        return
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 32)).astype(np.float32)
    w = rng.normal(size=(32,)).astype(np.float32)
    y = (x @ w > 0).astype(np.int64).reshape(n, 1)
    with zrecord.Writer.create(path, {"x": ("f32", [32]), "y": ("i64", [1])}) as wr:
        wr.append_batch({"x": x, "y": y})


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/zrecord-torch-example.zr")
    make(path)
    ds = zrecord.open(path)
    options = dict(batch_size=256, shuffle=True, seed=17, epochs=1, workers=2)
    data = zrecord.torch.IterableDataset(ds, **options)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)
    model = torch.nn.Linear(32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch) -> float:
        logits = model(batch["x"])
        loss = torch.nn.functional.cross_entropy(logits, batch["y"][:, 0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    seen, start = [], time.perf_counter()
    checkpoint = None
    for k, batch in enumerate(loader):
        step(batch)
        seen.append(batch["indices"].tolist())
        if k == 30:
            checkpoint = json.dumps(data.state_dict())  # what a trainer saves beside the model
    elapsed = time.perf_counter() - start
    n = sum(len(s) for s in seen)
    print(f"epoch: {n} records in {elapsed:.2f} s, {n / elapsed:,.0f} records/s")

    # Resume from the checkpoint taken after batch 30 into a fresh dataset object.
    resumed = zrecord.torch.IterableDataset(zrecord.open(path), **options)
    resumed.load_state_dict(json.loads(checkpoint))
    rest = [b["indices"].tolist() for b in torch.utils.data.DataLoader(resumed, batch_size=None)]
    assert rest == seen[31:], "the resumed run differs from the uninterrupted one"
    print(f"resumed after batch 30: the next {len(rest)} batches are exactly the uninterrupted run's")


if __name__ == "__main__":
    main()
