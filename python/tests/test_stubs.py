"""The type stubs (zrecord/_zrecord.pyi) match the extension module: mypy's stubtest finds no
name, signature or default that differs."""

from __future__ import annotations

import subprocess
import sys


def test_stubs_match_the_module(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases", "zrecord._zrecord"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
