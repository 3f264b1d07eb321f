"""Every codec round-trips from Python (zstd with and without a trained dictionary), codec
strings name the level, and a damaged dictionary file is a CorruptError naming it."""

from __future__ import annotations

import numpy as np
import pytest

import zrecord


def captions(n: int, seed: int = 0) -> list[bytes]:
    words = ["a", "photo", "of", "the", "red", "dog", "running", "on", "beach", "at", "sunset",
             "with", "blue", "sky", "and", "small", "boat", "near", "city", "street"]
    rng = np.random.default_rng(seed)
    return [(" ".join(words[k] for k in rng.integers(0, len(words), size=int(rng.integers(8, 40))))
             ).encode() for _ in range(n)]


@pytest.mark.parametrize("codec", ["raw", "deflate", "zstd", "zstd:9", "zstd_dict", "zstd_dict:1"])
def test_every_codec_round_trips(tmp_path, codec):
    recs = captions(3000)
    path = tmp_path / "ds.zr"
    schema = [zrecord.Field("text", "bytes", codec=codec)]
    with zrecord.Writer.create(path, schema) as w:
        w.append_batch({"text": recs})
    ds = zrecord.open(path)
    want = codec if ":" in codec or codec in ("raw", "deflate") else f"{codec}:3"
    assert ds.schema[0].codec == want
    idx = np.array([2999, 0, 1500, 0])
    b = ds.take(idx)
    col = b["text"]
    for j, i in enumerate(idx):
        assert bytes(col[j]) == recs[i]


def test_train_dictionary_and_bad_codecs(tmp_path):
    path = tmp_path / "ds.zr"
    with zrecord.Writer.create(path, [zrecord.Field("text", "bytes", codec="zstd_dict")]) as w:
        assert w.train_dictionary("text", captions(500, seed=1)) == 1
        w.append_batch({"text": captions(200)})
        with pytest.raises(zrecord.Error):
            w.train_dictionary("text", [b"x"])
    ds = zrecord.open(path)
    assert [bytes(r) for r in ds.take(np.arange(200))["text"]] == captions(200)
    for bad in ["zstd:0", "zstd:20", "zstd:x", "lz4", "raw:3"]:
        with pytest.raises(ValueError):
            zrecord.Field("t", "bytes", codec=bad)


def test_a_damaged_dictionary_is_a_corrupt_error(tmp_path):
    path = tmp_path / "ds.zr"
    with zrecord.Writer.create(path, [zrecord.Field("text", "bytes", codec="zstd_dict")]) as w:
        w.train_dictionary("text", captions(500, seed=1))
        w.append_batch({"text": captions(50)})
    dict_file = path / "text.1.zdict"
    data = bytearray(dict_file.read_bytes())
    data[len(data) // 2] ^= 0x40
    dict_file.write_bytes(bytes(data))
    with pytest.raises(zrecord.CorruptError) as e:
        zrecord.open(path)
    assert e.value.path == str(dict_file)
    assert e.value.field == "text"
    assert e.value.dictionary == 1


def test_rebalance_retrains_a_dictionary(tmp_path):
    path = tmp_path / "ds.zr"
    recs = captions(3000, seed=2)
    with zrecord.Writer.create(path, [zrecord.Field("text", "bytes", codec="zstd_dict"),
                                      zrecord.Field("plain", "bytes", codec="zstd")]) as w:
        w.append_batch({"text": recs, "plain": recs})
        w.commit()
        for i in range(0, 100, 9):
            w.delete(i)
            recs[i] = recs[-1]
            recs.pop()
        kept = w.rebalance()
        assert kept["records"] == len(recs)
        report = w.rebalance(retrain_dictionaries=True)
        assert report["records"] == len(recs)
        assert report["generation"] > kept["generation"]
    ds = zrecord.open(path)
    got = ds.take(np.arange(len(recs)))
    assert [bytes(r) for r in got["text"]] == recs
    assert [bytes(r) for r in got["plain"]] == recs
    # The commit names one dictionary for the field; the files of older ones are gone.
    assert len(list(path.glob("text.*.zdict"))) == 1
