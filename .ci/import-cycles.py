#!/usr/bin/env python3
"""Import cycles between files of src/: reads every `use crate::...` (and `super::`) path, maps it
to the file that defines the module it names, and prints each strongly connected component of
more than one file. Exit 1 if a component is not in the allowed list below.

Usage: .ci/import-cycles.py [--list]
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# Components allowed to stay (docs/ARCHITECTURE.md, "Two-way imports that remain").
ALLOWED = [
    {"store/writer/mod.rs", "*store/writer/"},
]


def module_file(parts):
    """The file defining module path `parts` (a list of names under crate), or None."""
    for k in range(len(parts), 0, -1):
        base = SRC.joinpath(*parts[:k])
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if cand.is_file():
                return cand
    return SRC / "lib.rs"


def module_of(path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts == ["lib"]:
        return []
    return parts


def uses(path):
    text = path.read_text()
    text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
    here = module_of(path)
    is_mod = path.name in ("mod.rs", "lib.rs")
    out = set()
    for m in re.finditer(r"\b(?:use\s+|\b)((?:crate|super)(?:::\w+)+)", text):
        segs = m.group(1).split("::")
        if segs[0] == "crate":
            parts = segs[1:]
        else:
            base = here if is_mod else here[:-1]
            i = 0
            while i < len(segs) and segs[i] == "super":
                base = base[:-1] if i > 0 else base
                i += 1
            parts = base + segs[i:]
        # Braced groups: `use crate::a::{b, c::d}`.
        tail = text[m.end():m.end() + 400]
        if tail.startswith("::{"):
            body = tail[3:tail.find("}")] if "}" in tail else ""
            for item in body.split(","):
                item = item.strip().split("::")
                if item and item[0]:
                    out.add(module_file(parts + item[:-1] if len(item) > 1 else parts + item))
        out.add(module_file(parts))
    out.discard(path)
    out.discard(None)
    return out


def sccs(graph):
    index, low, stack, on, res, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            res.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return res


def allowed(comp):
    for a in ALLOWED:
        if all(any(f == p or (p.startswith("*") and f.startswith(p[1:])) for p in a) for f in comp):
            return True
    return False


def main():
    files = [p for p in SRC.rglob("*.rs") if "bin" not in p.relative_to(SRC).parts]
    graph = {p: {q for q in uses(p) if q in files and q.name != "lib.rs"} for p in files}
    bad = 0
    for comp in sccs(graph):
        if len(comp) < 2:
            continue
        names = sorted(str(f.relative_to(SRC)) for f in comp)
        ok = allowed(set(names))
        bad += not ok
        print(("allowed: " if ok else "cycle: ") + " <-> ".join(names))
    sys.exit(1 if bad and "--list" not in sys.argv else 0)


if __name__ == "__main__":
    main()
