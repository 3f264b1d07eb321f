"""Every ```python snippet of README.md and docs/PYTHON.md type-checks with `mypy --strict`
against the installed package's stubs (zrecord/_zrecord.pyi), so the documented training loop
is one a user's type checker accepts.

A snippet that is not meant to be checked is marked on the line before its fence with
`<!-- mypy: skip (why) -->`; docs/PYTHON.md's signatures (`zrecord.open(path, *, ...) ->
Dataset`) are such snippets: a call with every option named is not code that runs. Every other
snippet is checked as a module of its own: it must import what it uses and define its inputs.

pyarrow ships no type information (no `py.typed`, no stubs), so its modules are untyped here,
as `ignore_missing_imports` makes them in a user's project; everything else (NumPy, Ray,
zrecord) is checked with its own annotations.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each document and the fewest snippets it has to check: the test fails rather than pass on a
# document whose snippets it no longer finds.
DOCS = {"README.md": 3, "docs/PYTHON.md": 1}
SKIP = re.compile(r"<!--\s*mypy:\s*skip\b.*-->")
FENCE = re.compile(r"^```python\s*$")


@dataclass
class Snippet:
    doc: str
    line: int  # of the first line of code, 1-based
    code: str
    skipped: bool

    @property
    def module(self) -> str:
        return re.sub(r"\W", "_", self.doc) + f"_L{self.line}"


def snippets(doc: str) -> list[Snippet]:
    lines = (ROOT / doc).read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        before = next((l for l in reversed(lines[:i]) if l.strip()), "")
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None
        )
        assert end is not None, f"{doc}:{i + 1}: a ```python block that is never closed"
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Snippet(doc, i + 2, code, bool(SKIP.search(before))))
        i = end + 1
    return found


def test_the_snippets_are_found():
    for doc, least in DOCS.items():
        checked = [s for s in snippets(doc) if not s.skipped]
        assert len(checked) >= least, f"{doc}: {len(checked)} snippets to check, want {least}"


def test_the_snippets_parse():
    # Checked apart from mypy, which stops at the first file that does not parse.
    for s in (s for doc in DOCS for s in snippets(doc) if not s.skipped):
        try:
            ast.parse(s.code)
        except SyntaxError as e:
            raise AssertionError(
                f"{s.doc}:{s.line + (e.lineno or 1) - 1}: {e.msg} (a snippet that is not code: "
                "mark it <!-- mypy: skip (why) -->)"
            ) from None


def test_the_snippets_pass_mypy_strict(tmp_path: Path):
    checked = [s for doc in DOCS for s in snippets(doc) if not s.skipped]
    assert len(checked) >= sum(DOCS.values())
    files = []
    for s in checked:
        f = tmp_path / f"{s.module}.py"
        f.write_text(s.code)
        files.append(str(f))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n\n[mypy-pyarrow.*]\nignore_missing_imports = True\n")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config),
         "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", *files],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    # mypy's lines are lines of the temporary files: name the document and its line instead.
    by_module = {s.module: s for s in checked}

    def where(m: re.Match[str]) -> str:
        s = by_module[Path(m[1]).stem]
        return f"{s.doc}:{s.line + int(m[2]) - 1}"

    report = re.sub(r"^(\S+\.py):(\d+)", where, r.stdout, flags=re.M)
    assert r.returncode == 0, report + r.stderr
