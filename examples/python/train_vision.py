#!/usr/bin/env python3
"""Train a small image classifier on a `zrecord convert images` dataset, stop mid-epoch, resume,
and check that the resumed run saw exactly the crops and flips of the uninterrupted one, on the
same number of ranks and on another (elastic resume).

Run:
    python examples/python/train_vision.py [IMAGE_DIR] [--framework numpy|torch] [--work DIR]

IMAGE_DIR is a folder of class folders (``IMAGE_DIR/<class>/*.jpg``, as torchvision's
``ImageFolder`` reads); without it the example draws a small synthetic one (Pillow) into
``--work`` (default /tmp/zrecord-vision-example). It converts the folder with
``zrecord.convert_images`` (or ``zrecord convert images IMAGE_DIR OUT`` from a shell), then
trains with ``Loader(transform={"image": [decode(), random_resized_crop(64), random_flip(),
normalize()]})``: the decode, crop, flip and normalize run in Rust on the loader's worker
threads and each batch arrives as one float32 array.

``--framework numpy`` (the default, what CI runs) trains a softmax regression on pooled pixels in
NumPy; ``--framework torch`` trains a small convolutional network with torch (``pip install
torch``). The resume checks are the same: every random choice of the transform comes from
(seed, epoch, record index), so the checkpoint is the loader's few-hundred-byte state and the
model's weights, nothing of the transform.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

import zrecord
from zrecord import transform as T

SIZE = 64
CLASSES = 4


def draw_images(folder: Path, per_class: int = 96) -> None:
    """A class-folder image set a small model can learn: class k tints its images with its own
    colour, over noise, at sizes from 80x60 to 160x120."""
    from PIL import Image

    if (folder / "done").exists():
        return
    rng = np.random.default_rng(0)
    tints = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]])
    for k in range(CLASSES):
        (folder / f"class{k}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = int(rng.integers(80, 161)), int(rng.integers(60, 121))
            noise = rng.integers(0, 200, size=(h, w, 3))
            px = np.clip(noise + tints[k] * rng.uniform(0.05, 0.3), 0, 255).astype(np.uint8)
            Image.fromarray(px).save(folder / f"class{k}" / f"{i:04d}.jpg", quality=90)
    (folder / "done").write_text("ok")


def loader(ds, *, rank=0, ranks=1, state=None, resume_from=None, epochs=2) -> zrecord.Loader:
    transform = {
        "image": [T.decode(), T.random_resized_crop(SIZE), T.random_flip(), T.normalize()],
    }
    return zrecord.Loader(
        ds,
        batch_size=32,
        shuffle=True,
        seed=7,
        epochs=epochs,
        workers=2,
        transform=transform,
        shard=(rank, ranks),
        state=state,
        resume_from=resume_from,
    )


def digests(batch) -> dict[int, str]:
    """Record index → a digest of the pixels it arrived with (its crop, flip and normalize)."""
    images = batch["image"]
    return {
        int(i): hashlib.blake2b(images[j].tobytes(), digest_size=8).hexdigest()
        for j, i in enumerate(batch.indices.tolist())
    }


class NumpyModel:
    """Softmax regression on 8x8 average-pooled pixels (192 features)."""

    def __init__(self) -> None:
        self.w = np.zeros((3 * 8 * 8, CLASSES), np.float32)

    @staticmethod
    def features(x: np.ndarray) -> np.ndarray:
        b = x.shape[0]  # (b, 3, 64, 64) float32
        return x.reshape(b, 3, 8, SIZE // 8, 8, SIZE // 8).mean(axis=(3, 5)).reshape(b, -1)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        f = self.features(x)
        logits = f @ self.w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-9).mean())
        p[np.arange(len(y)), y] -= 1
        self.w -= 0.5 * (f.T @ p) / len(y)
        return loss

    def state(self) -> np.ndarray:
        return self.w.copy()

    def load(self, state: np.ndarray) -> None:
        self.w = state.copy()

    def equals(self, state: np.ndarray) -> bool:
        return np.array_equal(self.w, state)


class TorchModel:
    """A two-layer convolutional network (torch, CPU)."""

    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 5, stride=2), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 5, stride=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, CLASSES),
        )
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        torch = self.torch
        loss = torch.nn.functional.cross_entropy(self.net(torch.from_numpy(x)), torch.from_numpy(y))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def state(self):
        import copy

        return copy.deepcopy((self.net.state_dict(), self.opt.state_dict()))

    def load(self, state) -> None:
        self.net.load_state_dict(state[0])
        self.opt.load_state_dict(state[1])

    def equals(self, state) -> bool:
        mine = self.net.state_dict()
        return all(self.torch.equal(mine[k], v) for k, v in state[0].items())


def train(model, batches, seen: dict, stop_after: int | None = None):
    """Trains on `batches` (to the end, or `stop_after` steps), noting in `seen` each (epoch,
    record)'s pixel digest; returns (steps, the last loss)."""
    steps, loss = 0, float("nan")
    for batch in batches:
        for index, digest in digests(batch).items():
            seen[(batch.epoch, index)] = digest
        loss = model.step(batch["image"], batch["label"].astype(np.int64))
        steps += 1
        if stop_after is not None and steps == stop_after:
            break
    return steps, loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("images", nargs="?", type=Path, help="a folder of class folders")
    p.add_argument("--framework", choices=["numpy", "torch"], default="numpy")
    p.add_argument("--work", type=Path, default=Path("/tmp/zrecord-vision-example"))
    a = p.parse_args()
    make = NumpyModel if a.framework == "numpy" else TorchModel

    images = a.images
    if images is None:
        images = a.work / "images"
        draw_images(images)
    out = a.work / "train.zr"
    if not out.exists():
        report = zrecord.convert_images(images, out)
        print(f"converted {report}")
    ds = zrecord.open(out)
    classes = ds.attributes.get("classes")
    print(f"{len(ds)} images, classes {classes}")

    # 1. Uninterrupted: two epochs.
    model, seen_full = make(), {}
    start = time.perf_counter()
    steps, loss = train(model, loader(ds), seen_full)
    elapsed = time.perf_counter() - start
    print(f"uninterrupted: {steps} steps, {len(seen_full)} crops in {elapsed:.2f} s "
          f"({len(seen_full) / elapsed:,.0f} images/s), final loss {loss:.3f}")
    full_state = model.state()

    # 2. Stop mid-epoch 0 (the checkpoint: the loader's state and the weights), resume in a new
    #    loader and a new model: the same crops, and the same weights at the end.
    model, seen = make(), {}
    first = loader(ds)
    it = iter(first)
    train(model, it, seen, stop_after=5)
    checkpoint = {"loader": json.loads(json.dumps(first.state_dict())), "model": model.state()}
    del it, first
    resumed_model = make()
    resumed_model.load(checkpoint["model"])
    train(resumed_model, loader(ds, state=checkpoint["loader"]), seen)
    assert seen == seen_full, "the resumed run saw other crops than the uninterrupted one"
    assert resumed_model.equals(full_state), "the weights differ"
    print(f"stopped after 5 steps and resumed: all {len(seen)} crops and flips as uninterrupted,"
          " and the same weights")

    # 3. Elastic: two ranks stop at different points of epoch 0, one rank resumes: every record
    #    of the interrupted epoch arrives once, with the crop the uninterrupted run gave it.
    seen, states = {}, []
    for rank, stop in enumerate([3, 1]):
        ranked = loader(ds, rank=rank, ranks=2, epochs=1)
        it = iter(ranked)
        for _ in range(stop):
            seen.update({(0, i): d for i, d in digests(next(it)).items()})
        states.append(json.loads(json.dumps(ranked.state_dict())))
        del it, ranked
    rest = {}
    for batch in loader(ds, resume_from=states, epochs=1):
        for i, d in digests(batch).items():
            assert (0, i) not in seen and (0, i) not in rest, f"record {i} twice"
            rest[(0, i)] = d
    seen.update(rest)
    want = {k: v for k, v in seen_full.items() if k[0] == 0}
    assert seen == want, "the elastic resume gave other crops"
    print(f"2 ranks stopped, 1 resumed: all {len(seen)} records of epoch 0 once, each with its crop")


if __name__ == "__main__":
    main()
    sys.exit(0)
