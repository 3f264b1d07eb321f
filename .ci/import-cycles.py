#!/usr/bin/env python3
"""Import cycles between files of src/: reads every `use crate::...` (and `super::`) path, maps it
to the file that defines the module it names, and prints each strongly connected component of
more than one file. Exit 1 if a component is not in the allowed list below.

Then one layer rule (issue #34): the read engine never calls back into the snapshot. No file
under src/store/read/ imports store/snapshot.rs, store/dataset.rs, store/writer/,
store/collection/ or the public collection module. It prints the rule and any exceptions
listed in READ_EXCEPTIONS (none left), and exits 1 on a violation not in that list or on a listed
one that is gone.

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


def absolute(segs, here, is_mod):
    """The module path (names under crate) of `crate::…` or `super::…` path `segs`, written in
    the module `here` (whose file is a `mod.rs`/`lib.rs` if `is_mod`)."""
    if segs[0] == "crate":
        return segs[1:]
    base = here if is_mod else here[:-1]
    i = 0
    while i < len(segs) and segs[i] == "super":
        base = base[:-1] if i > 0 else base
        i += 1
    return base + segs[i:]


def uses(path):
    text = path.read_text()
    text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
    here = module_of(path)
    is_mod = path.name in ("mod.rs", "lib.rs")
    out = set()
    for m in re.finditer(r"\b(?:use\s+|\b)((?:crate|super)(?:::\w+)+)", text):
        parts = absolute(m.group(1).split("::"), here, is_mod)
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


# The read engine never calls back into the snapshot (docs/ARCHITECTURE.md, "Import rules"):
# no file under store/read/ imports the layers above it, by a `crate::store::...` or `super::`
# path or by a crate-root name re-exported from them (`crate::Snapshot`). Comments, doc links and
# `#[cfg(test)] mod tests` are not imports.
READ = "store/read/"
ABOVE_READ = ("store/snapshot.rs", "store/dataset.rs", "store/writer/", "store/collection/",
              "collection.rs")
# Imports that break the rule and are allowed for now: file under store/read/ -> the files above
# it it imports. Empty since issue #34 moved resolving and the snapshot's read driver up into
# store/ (resolve.rs, gather.rs). An entry would be a debt to pay back: a violation not listed
# here fails the check, and a listed one that is gone is reported, so the list only shrinks.
READ_EXCEPTIONS = {}


def root_names():
    """Crate-root names re-exported from a module: `pub use store::snapshot::{Snapshot, ..}`
    gives {"Snapshot": src/store/snapshot.rs, ..}."""
    text = (SRC / "lib.rs").read_text()
    out = {}
    for m in re.finditer(r"pub use ((?:\w+::)*\w+)::(\{[^}]*\}|\w+);", text):
        origin = module_file(m.group(1).split("::"))
        for name in re.findall(r"\w+", m.group(2)):
            out[name] = origin
    return out


def upper_imports(path, roots):
    """The files above store/read/ that `path` imports."""
    text = path.read_text()
    text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
    text = re.sub(r"//.*", "", text)
    here = module_of(path)
    is_mod = path.name == "mod.rs"
    hits = set()
    # `use crate::{a::b, c}` reads as `crate::a::b` and `crate::c`.
    text = re.sub(r"\bcrate::\{([^}]*)\}",
                  lambda m: ", ".join("crate::" + i.strip() for i in m.group(1).split(",")), text)
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", text):
        parts = absolute(m.group(1).split("::"), here, is_mod)
        cands = []
        tail = text[m.end():m.end() + 400]
        if tail.startswith("::{") and "}" in tail:
            cands += [parts + [s.strip() for s in item.split("::")]
                      for item in tail[3:tail.find("}")].split(",") if item.strip()]
        cands.append(parts)
        for p in cands:
            f = roots.get(p[0]) if p and p[0] in roots else module_file(p)
            if f is None:
                continue
            rel = str(f.relative_to(SRC))
            if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ABOVE_READ):
                hits.add(rel)
    return hits


def read_rule():
    """Checks the read rule; returns the number of violations not in READ_EXCEPTIONS."""
    print("rule: no file under src/store/read/ imports " + ", ".join(ABOVE_READ)
          + " (the read engine never calls back into the snapshot)")
    roots = root_names()
    bad = 0
    seen = {}
    for path in sorted(SRC.joinpath(READ).rglob("*.rs")):
        rel = str(path.relative_to(SRC))
        hits = upper_imports(path, roots)
        if not hits:
            continue
        seen[rel] = hits
        allowed_here = READ_EXCEPTIONS.get(rel, set())
        for h in sorted(hits):
            ok = h in allowed_here
            bad += not ok
            print(("  exception (to be removed, issue #34): " if ok else "  violation: ")
                  + f"{rel} imports {h}")
    for rel, targets in sorted(READ_EXCEPTIONS.items()):
        for t in sorted(targets - seen.get(rel, set())):
            print(f"  stale exception: {rel} no longer imports {t}: remove it from READ_EXCEPTIONS")
            bad += 1
    return bad


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
    bad += read_rule()
    sys.exit(1 if bad and "--list" not in sys.argv else 0)


if __name__ == "__main__":
    main()
