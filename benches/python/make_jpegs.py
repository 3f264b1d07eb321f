"""Makes issue #32's JPEG set deterministically: N images of 320x240 to 500x375 pixels (18-48 KB,
photo-like: smooth colour fields, shapes, texture), as files under OUT/files/<class>/ (10 class
folders) and as a zrecord dataset OUT/train.zr (image: the JPEG bytes, label: i64).

    python benches/python/make_jpegs.py target/bench-data/vision 30000
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

import zrecord


def image(i: int) -> bytes:
    rng = np.random.default_rng(i)
    w = int(rng.integers(320, 501))
    h = int(rng.integers(240, 376))
    # A smooth colour field: a coarse random grid upsampled.
    coarse = rng.integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    img = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
    d = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 12))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(20, w // 2)), y0 + int(rng.integers(20, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)((x0, y0, x1, y1), fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    px = np.asarray(img).astype(np.int16)
    px += rng.normal(0, 7, size=px.shape).astype(np.int16)
    out = io.BytesIO()
    Image.fromarray(px.clip(0, 255).astype(np.uint8)).save(out, format="JPEG", quality=88)
    return out.getvalue()


def main() -> None:
    out = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 30_000
    files = out / "files"
    ds = out / "train.zr"
    if (out / "done").exists() and (out / "done").read_text() == str(n):
        print(f"{out}: {n} images already there")
        return
    sizes = []
    with zrecord.Writer.create(ds, {"image": "bytes", "label": ("i64", [])}) as w:
        for i in range(n):
            data = image(i)
            sizes.append(len(data))
            label = i % 10
            d = files / f"class{label}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i:06d}.jpg").write_bytes(data)
            w.append({"image": np.frombuffer(data, np.uint8), "label": np.int64(label)})
    (out / "done").write_text(str(n))
    s = np.array(sizes)
    print(f"{n} JPEGs, {s.min()}-{s.max()} bytes (median {int(np.median(s))}) in {files} and {ds}")


if __name__ == "__main__":
    main()
