"""examples/python/train_vision.py, as CI runs it (NumPy model): a synthetic class-folder image
set converted with zrecord.convert_images, two epochs of decode → random resized crop → flip →
normalize, then a stop after 5 steps and a resume that sees every crop and flip of the
uninterrupted run and ends with the same weights, and a 2-rank → 1-rank elastic resume that gives
every record of the interrupted epoch the crop it would have had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "train_vision.py"


def test_train_vision_resumes_exactly(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, str(EXAMPLE), "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        # One BLAS thread: the weights of the resumed run must equal the uninterrupted run's
        # bit for bit, and a threaded reduction need not sum in the same order twice.
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "as uninterrupted, and the same weights" in out, out
    assert "2 ranks stopped, 1 resumed" in out, out
    assert "classes ['class0', 'class1', 'class2', 'class3']" in out, out
