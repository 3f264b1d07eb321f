"""convert_images and convert_webdataset from Python: class folders become image bytes and
labels with the class names in Dataset.attributes, tar shards become a field per extension, a
bad image raises SchemaError naming the file and member, and a Writer's attributes round-trip."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from PIL import Image

import zrecord


def _jpeg(i: int, w: int = 12, h: int = 10) -> bytes:
    px = (np.arange(w * h * 3).reshape(h, w, 3) * (i + 1)) % 251
    out = io.BytesIO()
    Image.fromarray(px.astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def _folders(root):
    want = []
    for label, cls in enumerate(["dog", "cat"]):
        d = root / cls
        d.mkdir(parents=True)
        for i in range(4):
            data = _jpeg(label * 10 + i)
            (d / f"{i}.jpg").write_bytes(data)
            want.append((cls, i, data))
    # Sorted by class name: cat first.
    return sorted(want)


def test_images_convert_with_classes(tmp_path):
    want = _folders(tmp_path / "train")
    report = zrecord.convert_images(tmp_path / "train", tmp_path / "out.zr", commit_every=3)
    assert report["records"] == 8 and report["skipped"] == 0 and report["resumed"] == 0
    ds = zrecord.open(tmp_path / "out.zr")
    assert ds.attributes == {"classes": ["cat", "dog"]}
    batch = ds.take(list(range(8)))
    labels = batch["label"]
    assert list(labels.reshape(-1)) == [0] * 4 + [1] * 4
    for k, (_, _, data) in enumerate(want):
        assert ds[k]["image"].tobytes() == data

    small = zrecord.convert_images(tmp_path / "train", tmp_path / "small.zr", max_side=6)
    assert small["records"] == 8
    img = zrecord.open(tmp_path / "small.zr")[0]["image"].tobytes()
    assert max(Image.open(io.BytesIO(img)).size) == 6


def test_a_bad_image_names_the_file(tmp_path):
    _folders(tmp_path / "train")
    (tmp_path / "train" / "dog" / "2.jpg").write_bytes(b"not an image")
    with pytest.raises(zrecord.SchemaError) as e:
        zrecord.convert_images(tmp_path / "train", tmp_path / "out.zr")
    assert e.value.path.endswith("dog/2.jpg")
    assert e.value.member is None
    r = zrecord.convert_images(tmp_path / "train", tmp_path / "skip.zr", skip_bad=True)
    assert r["skipped"] == 1 and r["records"] == 7


def _shard(path, members):
    with tarfile.open(path, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_webdataset_convert(tmp_path):
    shards = []
    for s in range(2):
        members = []
        for i in range(3):
            key = f"{s}{i:03d}"
            members += [(f"{key}.jpg", _jpeg(i)), (f"{key}.cls", str(i).encode())]
        p = tmp_path / f"shard-{s}.tar"
        _shard(p, members)
        shards.append(p)
    r = zrecord.convert_webdataset(shards, tmp_path / "wds.zr")
    assert r["records"] == 6 and r["fields"] == 2
    ds = zrecord.open(tmp_path / "wds.zr")
    assert ds.fields == ["cls", "jpg"]
    assert list(ds.take([0, 1, 2, 3, 4, 5])["cls"].reshape(-1)) == [0, 1, 2, 0, 1, 2]
    assert ds[4]["jpg"].tobytes() == _jpeg(1)
    _shard(tmp_path / "bad.tar", [("x.jpg", b"GIF89a")])
    with pytest.raises(zrecord.SchemaError) as e:
        zrecord.convert_webdataset([tmp_path / "bad.tar"], tmp_path / "bad.zr")
    assert e.value.member == "x.jpg"


def test_writer_attributes_round_trip(tmp_path):
    with zrecord.Writer.create(tmp_path / "a.zr", [zrecord.Field("x", "u8")]) as w:
        w.append({"x": np.zeros(3, np.uint8)})
        w.set_attribute("meta", {"k": [1, 2.5, "s", None]})
        w.commit()
        w.remove_attribute("nope")
    ds = zrecord.open(tmp_path / "a.zr")
    assert ds.attributes == {"meta": {"k": [1, 2.5, "s", None]}}
    with zrecord.Writer.open(tmp_path / "a.zr") as w:
        with pytest.raises(TypeError):
            w.set_attribute("bad", object())
        with pytest.raises(zrecord.ConfigError):
            w.set_attribute("", 1)
