"""The transform stage: per-record operations a ``Loader`` runs on its worker threads.

Give a ``Loader`` a ``transform=`` dict of field name → operations, applied in order to every
record's value of that field; the last one's output lands in the batch, one array per field::

    import zrecord
    from zrecord import transform as T

    loader = zrecord.Loader(ds, batch_size=256, seed=17, workers=2, transform={
        "image": [T.decode(), T.random_resized_crop(224), T.random_flip()],
    })
    for batch in loader:
        images = batch.array("image")      # (256, 224, 224, 3) uint8, zero-copy
        labels = batch.array("label")

The built-in operations are Rust: they run without the GIL, on every worker, and write no
Python object per record. A Python callable in the list runs on the workers too (each
call holds the GIL; Pillow, OpenCV and NumPy release it while they work): ``fn(x)``, where
``x`` is ``bytes`` (the stored value), or a NumPy array (an image, ``(height, width, channels)``
``uint8``, after ``decode()``); it returns ``bytes``, a NumPy array or anything
``numpy.asarray`` takes (a PIL image). Wrap it in :func:`random_map` to get a
``numpy.random.Generator`` as well.

Every random choice comes from (seed, epoch, record index, field): the same record gets the
same crop in the same epoch with any number of workers, after ``state=`` resume, and on any
number of ranks after ``resume_from=``. A failure raises :class:`zrecord.TransformError`
naming the record, field and operation (or, with ``on_error="skip"``, skips the batch).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ._zrecord import Op, _op, _py_op

__all__ = [
    "Op",
    "center_crop",
    "decode",
    "normalize",
    "random_crop",
    "random_map",
    "random_flip",
    "random_resized_crop",
    "resize",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def decode(channels: int | None = 3) -> Op:
    """Decodes JPEG or PNG bytes (the format is sniffed) into an image of ``channels`` channels:
    1 (grey), 3 (RGB, the default), 4 (RGBA), or ``None`` for the image's own. Only the header
    is read here; the next operation decodes what it needs."""
    return _op("decode", {"channels": channels})


def random_resized_crop(
    size: int | tuple[int, int],
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> Op:
    """torchvision's ``RandomResizedCrop``: a random share ``scale`` of the area with a random
    aspect ratio (log-uniform in ``ratio``), resized to ``size`` (an int, or ``(height,
    width)``), bilinear with antialiasing."""
    return _op("random_resized_crop", {"size": size, "scale": scale, "ratio": ratio})


def random_crop(size: int | tuple[int, int]) -> Op:
    """A window of ``size`` (an int, or ``(height, width)``) at a uniformly random place, as
    torchvision's ``RandomCrop(size, pad_if_needed=True)``: where the image is smaller, it is
    centred and padded with zeros."""
    return _op("random_crop", {"size": size})


def resize(size: int | tuple[int, int]) -> Op:
    """Resizes: an int sets the shorter side (keeping the aspect ratio, as torchvision's
    ``Resize(int)``), a ``(height, width)`` pair both sides."""
    return _op("resize", {"size": size})


def center_crop(size: int | tuple[int, int]) -> Op:
    """The centred window of ``size`` (an int, or ``(height, width)``), padded with zeros where
    the image is smaller, as torchvision's ``CenterCrop``."""
    return _op("center_crop", {"size": size})


def random_flip(p: float = 0.5, horizontal: bool = True) -> Op:
    """Mirrors the image with probability ``p``: left to right, or top to bottom if
    ``horizontal`` is false."""
    return _op("random_flip", {"p": p, "horizontal": horizontal})


def normalize(
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    dtype: str = "float32",
    layout: str = "CHW",
) -> Op:
    """``(x / 255 - mean) / std`` per channel, as ``float32``, ``float16`` or ``bfloat16``, laid
    out ``"CHW"`` (PyTorch) or ``"HWC"``. The defaults are ImageNet's."""
    return _op(
        "normalize", {"mean": list(mean), "std": list(std), "dtype": dtype, "layout": layout}
    )


def random_map(fn: Callable[[Any, Any], Any], name: str | None = None) -> Op:
    """A Python callable called ``fn(x, rng)``, with ``rng`` a ``numpy.random.Generator`` seeded
    from the record's (seed, epoch, index, field): draw every random choice from it and resume
    stays exact."""
    return _py_op(fn, True, name)
