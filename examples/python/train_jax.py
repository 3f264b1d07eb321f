#!/usr/bin/env python3
"""Train a linear classifier with JAX (CPU) on a zrecord dataset, stop mid-epoch, and resume
exactly, on a different number of ranks too (elastic resume, simulated in one process).

Run: python examples/python/train_jax.py [DIR]   (needs jax; writes a synthetic dataset into
DIR, default /tmp/zrecord-jax-example.zr). Prints records/s.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import zrecord


def make(path: Path, n: int = 20_000) -> None:
    if path.exists():
        return
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 32)).astype(np.float32)
    w = rng.normal(size=(32,)).astype(np.float32)
    y = (x @ w > 0).astype(np.int64).reshape(n, 1)
    with zrecord.Writer.create(path, {"x": ("f32", [32]), "y": ("i64", [1])}) as wr:
        wr.append_batch({"x": x, "y": y})


@jax.jit
def step(w, x, y):
    def loss(w):
        logits = x @ w
        return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)

    l, g = jax.value_and_grad(loss)(w)
    return w - 0.1 * g, l


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/zrecord-jax-example.zr")
    make(path)
    ds = zrecord.open(path)
    options = dict(batch_size=256, shuffle=True, seed=5, epochs=1, workers=2)
    w = jnp.zeros(32)
    start, n = time.perf_counter(), 0
    for batch in zrecord.Loader(ds, **options):
        w, l = step(w, jnp.asarray(batch["x"]), jnp.asarray(batch["y"][:, 0], dtype=jnp.float32))
        n += len(batch)
    elapsed = time.perf_counter() - start
    print(f"epoch: {n} records in {elapsed:.2f} s, {n / elapsed:,.0f} records/s, loss {float(l):.3f}")

    # Four ranks stop at different points; three ranks resume; every record once.
    states, consumed = [], Counter()
    for rank, steps in enumerate([5, 9, 2, 0]):
        loader = zrecord.Loader(ds, **options, shard=(rank, 4))
        it = iter(loader)
        for _ in range(steps):
            consumed.update(next(it).indices.tolist())
        states.append(json.loads(json.dumps(loader.state_dict())))
    for rank in range(3):
        for batch in zrecord.Loader(ds, **options, shard=(rank, 3), resume_from=states):
            consumed.update(batch.indices.tolist())
    assert len(consumed) == len(ds) and set(consumed.values()) == {1}
    print(f"4 ranks stopped, 3 resumed: all {len(ds)} records exactly once")


if __name__ == "__main__":
    main()
