#!/usr/bin/env python3
"""The public surface of the `zrecord` library, derived from its source: one line per public
path (module, function, type, trait, constant, re-export of another crate's item) with its
signature, then each public type's pub fields, enum variants, trait methods and inherent pub
methods and constants. A `[cfg(...)]` prefix says which feature a line needs.

The list starts at `src/lib.rs`, follows `pub mod` and `pub use` (through private modules, braces,
renames and globs) and resolves each `impl` block's type in the module that writes it, so two
types of one name in different modules stay apart. Trait implementations (`impl Trait for T`)
are not listed. Comments, strings, `#[cfg(test)]` items and function bodies are skipped.

Usage:
  .ci/public-api.py            print the list
  .ci/public-api.py --check    compare with docs/public-api.txt, print a diff, exit 1 if they differ
  .ci/public-api.py --write    rewrite docs/public-api.txt
  .ci/public-api.py --count    print the number of public paths and of distinct items
  .ci/public-api.py --origins  each public path and the module path of the item it names

Python 3.11, no third-party packages.
"""
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
LIST = ROOT / "docs" / "public-api.txt"
CRATE = "zrecord"
# Types that public signatures name without a public path, known and left as they are.
HIDDEN_ALLOWED = {
    # The file-system seam (feature `testing`): `Prefix::Mapped` holds the mmap module's mapping.
    "zrecord::testing::Prefix: io::mmap::Mapping",
}

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line>//[^\n]*)
  | (?P<block>/\*)
  | (?P<rawstr>b?r\#*")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\.|[^'\\])')
  | (?P<life>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>::|->|=>|\.\.=|\.\.\.|\.\.|[{}()\[\]<>,;:#!=&*+\-/%^|.?@$~])
    """,
    re.X | re.S,
)


def tokenize(text):
    out, i = [], 0
    while i < len(text):
        m = TOKEN.match(text, i)
        if not m:
            raise SyntaxError(f"cannot tokenize at {text[i:i + 40]!r}")
        kind = m.lastgroup
        if kind == "block":
            depth, j = 1, m.end()
            while depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            i = j
            continue
        if kind == "rawstr":
            hashes = m.group().count("#")
            end = text.index('"' + "#" * hashes, m.end())
            out.append('"..."')
            i = end + 1 + hashes
            continue
        i = m.end()
        if kind in ("ws", "line"):
            continue
        out.append(m.group())
    return out


def join(tokens):
    """Tokens as one line of Rust, spaced the same way whatever the source's layout."""
    s = ""
    prev = ""
    tokens = [t for k, t in enumerate(tokens)
              if not (t == "," and k + 1 < len(tokens) and tokens[k + 1] in (")", "]", "}", ">"))]
    for t in tokens:
        tight_before = t in (",", ";", ")", "]", ".", "::", "?", ":") or (
            t in ("(", "[") and prev not in ("", ",", "=", "->", "&", "(", "|", "mut", "dyn", "as",
                                               ":", "in", "impl")
        )
        tight_after = prev in ("(", "[", "::", "&", "#", "!", ".", "'", "?") or prev == ""
        if t == "<" and prev not in ("=", "->", ","):
            tight_before = True
        if prev == "<" or t == ">" or (prev == ">" and t in ("(", "::", ">")):
            tight_before = True
        if prev == "&" and t.startswith("'"):
            tight_after = True
        if prev == "!" and t == "=":
            tight_after = True
        if t == "!" and prev not in ("", "(", ",", "=", "{"):
            tight_before = True
        s += t if (tight_before or tight_after) else " " + t
        prev = t
    return s


class Module:
    def __init__(self, path, file, parent):
        self.path = path  # list of names under the crate
        self.file = file
        self.parent = parent
        self.items = {}  # name -> list of Item
        self.uses = []  # Use
        self.impls = []  # (self-type tokens, [member lines])

    def name(self):
        return "::".join([CRATE] + self.path)


class Item:
    def __init__(self, kind, name, pub, cfg, module, sig, members=(), deprecated=False):
        self.kind, self.name, self.pub, self.cfg = kind, name, pub, cfg
        self.module, self.sig, self.members, self.deprecated = module, sig, list(members), deprecated


class Use:
    def __init__(self, pub, cfg, segs, alias, glob, deprecated):
        self.pub, self.cfg, self.segs, self.alias, self.glob = pub, cfg, segs, alias, glob
        self.deprecated = deprecated


def matching(tokens, i):
    """Index just past the bracket group opening at tokens[i]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t in pairs:
            depth += 1
        elif t in ("}", ")", "]"):
            depth -= 1
            if depth == 0:
                return j + 1
    raise SyntaxError("unbalanced brackets")


def until_body(tokens, i):
    """Index of the `{` or `;` that ends an item header starting at i (angle brackets and
    parentheses skipped)."""
    depth = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("(", "["):
            i = matching(tokens, i)
            continue
        if t == "<":
            depth += 1
        elif t == ">" and depth:
            depth -= 1
        elif t in ("{", ";") and depth == 0:
            return i
        i += 1
    return i


def split_use(tokens, prefix):
    """`use` tree tokens -> list of (segments, alias, glob)."""
    out = []
    i = 0
    segs = list(prefix)
    while i < len(tokens):
        t = tokens[i]
        if t == "::":
            i += 1
        elif t == "{":
            end = matching(tokens, i)
            inner = tokens[i + 1:end - 1]
            depth, start = 0, 0
            parts = []
            for k, u in enumerate(inner):
                if u == "{":
                    depth += 1
                elif u == "}":
                    depth -= 1
                elif u == "," and depth == 0:
                    parts.append(inner[start:k])
                    start = k + 1
            parts.append(inner[start:])
            for p in parts:
                if p:
                    out += split_use(p, segs)
            return out
        elif t == "*":
            out.append((segs, None, True))
            return out
        elif t == "as":
            out.append((segs, tokens[i + 1], False))
            return out
        else:
            segs = segs + [t]
            i += 1
    if segs == list(prefix) + ["self"]:
        segs = list(prefix)
    elif segs and segs[-1] == "self":
        segs = segs[:-1]
    out.append((segs, None, False))
    return out


def cfg_of(attrs):
    cfgs = [a for a in attrs if a.startswith("cfg(")]
    return cfgs


def parse_members(tokens, kind):
    """pub fields of a struct body or variants of an enum body (tokens inside the braces)."""
    out, depth, start = [], 0, 0
    parts = []
    for k, t in enumerate(tokens):
        if t in ("{", "(", "[", "<"):
            depth += 1
        elif t in ("}", ")", "]", ">"):
            depth -= 1
        elif t == "," and depth == 0:
            parts.append(tokens[start:k])
            start = k + 1
    parts.append(tokens[start:])
    for p in parts:
        while p and p[0] == "#":
            p = p[matching(p, 1):]
        if not p:
            continue
        if kind == "enum":
            out.append(join(p))
        elif p[0] == "pub" and (len(p) < 2 or p[1] != "("):
            out.append(join(p))
    return out


def parse_block(tokens, module, load_child):
    """Items of a module body or file."""
    i = 0
    attrs = []
    while i < len(tokens):
        t = tokens[i]
        if t == "#":
            inner = tokens[i + 1] == "!"
            start = i + 2 if inner else i + 1
            end = matching(tokens, start)
            if not inner:
                attrs.append(join(tokens[start + 1:end - 1]))
            i = end
            continue
        cfg = cfg_of(attrs)
        skip = any(c in ("cfg(test)",) for c in cfg)
        deprecated = any(a.startswith("deprecated") for a in attrs)
        attrs = []
        pub = False
        if t == "pub":
            if tokens[i + 1] == "(":
                i = matching(tokens, i + 1)
            else:
                pub = True
                i += 1
            t = tokens[i]
        while t in ("unsafe", "async", "const", "extern", "default") and tokens[i + 1] not in (
            ":",
        ) and not (t == "const" and tokens[i + 2] == ":"):
            if t == "extern" and tokens[i + 1].startswith('"'):
                i += 1
            i += 1
            t = tokens[i]
        head = i
        if t == "use":
            end = tokens.index(";", i)
            if not skip:
                for segs, alias, glob in split_use(tokens[i + 1:end], []):
                    module.uses.append(Use(pub, cfg, segs, alias, glob, deprecated))
            i = end + 1
        elif t == "mod":
            name = tokens[i + 1]
            if tokens[i + 2] == ";":
                i += 3
                if not skip:
                    child = load_child(module, name)
                    module.items.setdefault(name, []).append(
                        Item("mod", name, pub, cfg, module, None, deprecated=deprecated))
                    module.items[name][-1].target = child
            else:
                end = matching(tokens, i + 2)
                if not skip:
                    child = Module(module.path + [name], module.file, module)
                    parse_block(tokens[i + 3:end - 1], child, load_child)
                    module.items.setdefault(name, []).append(
                        Item("mod", name, pub, cfg, module, None, deprecated=deprecated))
                    module.items[name][-1].target = child
                i = end
        elif t == "impl":
            end = until_body(tokens, i)
            header = tokens[i + 1:end]
            body_end = matching(tokens, end)
            if not skip:
                parse_impl(header, tokens[end + 1:body_end - 1], module)
            i = body_end
        elif t in ("fn", "struct", "enum", "trait", "type", "const", "static", "union"):
            name = tokens[i + 1]
            if t == "static" and name == "mut":
                name = tokens[i + 2]
            if t in ("const", "static"):
                end = i
                while tokens[end] != ";":
                    end = matching(tokens, end) if tokens[end] in ("(", "[", "{") else end + 1
            else:
                end = until_body(tokens, i)
            sig_start = head
            header = tokens[sig_start:end]
            if t == "struct" and "(" in header:
                # A tuple struct: its private fields are not part of the surface.
                k = header.index("(")
                close = matching(header, k)
                fields = parse_members(header[k + 1:close - 1], "struct")
                header = header[:k] + ["("] + ([", ".join(fields)] if fields else [".."]) + \
                    [")"] + header[close:]
            sig = join(header)
            members = []
            if end < len(tokens) and tokens[end] == "{":
                body_end = matching(tokens, end)
                body = tokens[end + 1:body_end - 1]
                if t in ("struct", "union"):
                    members = parse_members(body, "struct")
                elif t == "enum":
                    members = parse_members(body, "enum")
                elif t == "trait":
                    members = trait_members(body)
                i = body_end
            else:
                # `struct X(..);`, `type X = ..;`, `const X: T = ..;`
                semi = end
                while semi < len(tokens) and tokens[semi] != ";":
                    semi += 1
                if t in ("type", "const", "static"):
                    sig = join(tokens[sig_start:semi])
                    if t in ("const", "static") and "=" in tokens[sig_start:semi]:
                        sig = join(tokens[sig_start:tokens.index("=", sig_start)])
                i = semi + 1
            if not skip:
                item = Item(t, name, pub, cfg, module, sig, members, deprecated)
                module.items.setdefault(name, []).append(item)
        elif t == "macro_rules":
            end = matching(tokens, i + 3)
            i = end
            if i < len(tokens) and tokens[i] == ";":
                i += 1
        elif t == ";":
            i += 1
        elif i + 2 < len(tokens) and tokens[i + 1] == "!" and tokens[i + 2] in ("(", "[", "{"):
            i = matching(tokens, i + 2)  # an item macro: `compile_error!(..);`
            if i < len(tokens) and tokens[i] == ";":
                i += 1
        else:
            raise SyntaxError(f"{module.file}: unexpected {join(tokens[i:i + 8])!r}")


def trait_members(body):
    out = []
    i = 0
    while i < len(body):
        t = body[i]
        if t == "#":
            i = matching(body, i + 1)
            continue
        if t in ("fn", "type", "const", "unsafe", "async"):
            start = i
            end = until_body(body, i)
            out.append(join(body[start:end]))
            i = matching(body, end) if end < len(body) and body[end] == "{" else end + 1
            continue
        i += 1
    return out


def parse_impl(header, body, module):
    # Skip generics: `impl<T: X> ...`.
    j = 0
    if header and header[0] == "<":
        depth = 0
        for j, t in enumerate(header):
            if t == "<":
                depth += 1
            elif t == ">":
                depth -= 1
                if depth == 0:
                    break
        j += 1
    rest = header[j:]
    if "for" in rest:
        return  # a trait implementation
    if "where" in rest:
        rest = rest[:rest.index("where")]
    # The self type's path, without its generic arguments.
    segs = []
    for t in rest:
        if t == "<":
            break
        if t != "::":
            segs.append(t)
    members = []
    i = 0
    attrs = []
    while i < len(body):
        t = body[i]
        if t == "#":
            end = matching(body, i + 1)
            attrs.append(join(body[i + 2:end - 1]))
            i = end
            continue
        skip = "cfg(test)" in attrs
        cfg = cfg_of(attrs)
        dep = any(a.startswith("deprecated") for a in attrs)
        attrs = []
        if t == "pub" and body[i + 1] != "(":
            end = until_body(body, i)
            if body[i + 1] in ("const",) and body[i + 2] != "fn":
                semi = body.index(";", i)
                eq = body.index("=", i) if "=" in body[i:semi] else semi
                line = join(body[i + 1:eq])
                i = semi + 1
            else:
                line = join(body[i + 1:end])
                i = matching(body, end) if end < len(body) and body[end] == "{" else end + 1
            if not skip:
                members.append((cfg, dep, line))
            continue
        if t == "{":
            i = matching(body, i)
            continue
        if t in ("fn", "const", "type") or t == "pub":
            end = until_body(body, i)
            i = matching(body, end) if end < len(body) and body[end] == "{" else end + 1
            continue
        i += 1
    module.impls.append((segs, members))


def load(path, file):
    module = Module(path, file, None)

    def load_child(parent, name):
        f = parent.file
        base = f.parent if f.name in ("lib.rs", "mod.rs") else f.with_suffix("")
        for cand in (base / f"{name}.rs", base / name / "mod.rs"):
            if cand.is_file():
                child = Module(parent.path + [name], cand, parent)
                parse_block(tokenize(cand.read_text()), child, load_child)
                return child
        raise FileNotFoundError(f"module {name} of {f}")

    parse_block(tokenize(file.read_text()), module, load_child)
    return module


class Resolver:
    def __init__(self, root):
        self.root = root

    def lookup(self, module, name, seen):
        """Items named `name` in `module`'s scope: its own items and its imports."""
        key = (id(module), name)
        if key in seen:
            return []
        seen = seen | {key}
        found = [(it, []) for it in module.items.get(name, [])]
        for u in module.uses:
            if u.glob:
                target = self.resolve_module(module, u.segs, seen)
                if target is not None:
                    for it, cfg in self.lookup(target, name, seen):
                        if it.pub:
                            found.append((it, u.cfg + cfg))
                continue
            local = u.alias or (u.segs[-1] if u.segs else None)
            if local == name:
                for it, cfg in self.resolve(module, u.segs, seen):
                    found.append((it, u.cfg + cfg))
                if not self.resolve(module, u.segs, seen):
                    found.append((Item("extern", name, u.pub, [], module, "::".join(u.segs)),
                                  u.cfg))
        return found

    def resolve_module(self, module, segs, seen=frozenset()):
        found = self.resolve(module, segs, seen)
        for it, _ in found:
            if it.kind == "mod":
                return it.target
        return None

    def resolve(self, module, segs, seen=frozenset()):
        if not segs:
            return []
        head, rest = segs[0], segs[1:]
        if head == "crate":
            cur = self.root
        elif head == "self":
            cur = module
        elif head == "super":
            cur = module.parent
        else:
            cur = None
        if cur is not None:
            while rest and rest[0] == "super":
                cur, rest = cur.parent, rest[1:]
            if not rest:
                return [(Item("mod", cur.path[-1] if cur.path else CRATE, True, [], cur, None), [])]
            return self.walk(cur, rest, seen)
        return self.walk(module, segs, seen)

    def walk(self, module, segs, seen):
        found = self.lookup(module, segs[0], seen)
        if len(segs) == 1:
            return found
        for it, cfg in found:
            if it.kind == "mod":
                target = getattr(it, "target", None) or it.module
                return [(i, cfg + c) for i, c in self.walk(target, segs[1:], seen)]
        return []


def surface(root):
    r = Resolver(root)
    impls = {}
    for m in all_modules(root):
        for segs, members in m.impls:
            for it, _ in r.resolve(m, segs):
                if it.kind in ("struct", "enum", "union", "type", "trait"):
                    impls.setdefault(id(it), []).extend((c, d, line, m) for c, d, line in members)
                    break
    lines = []
    items = set()
    texts = []
    origin = []

    def prefix(cfg, dep):
        p = "".join(f"#[{c}] " for c in dict.fromkeys(cfg))
        return p + ("#[deprecated] " if dep else "")

    def emit(path, it, cfg, dep):
        items.add(id(it))
        origin.append((path, "::".join(it.module.path + [it.name]) if it.kind != "extern"
                       else it.sig))
        dep = dep or it.deprecated
        if it.kind == "extern":
            lines.append(f"{prefix(cfg, dep)}pub use {path} = {it.sig}")
            return
        sig = it.sig
        # The signature with its full public path in place of the bare name.
        sig = re.sub(rf"\b{it.kind} {re.escape(it.name)}\b", f"{it.kind} {path}", sig, count=1)
        lines.append(f"{prefix(cfg, dep)}pub {sig}")
        for m in it.members:
            lines.append(f"  {prefix(cfg, dep)}{path} :: {m}")
        texts.append((path, it.module, [it.sig or ""] + it.members))
        for mcfg, mdep, m, mod in impls.get(id(it), []):
            lines.append(f"  {prefix(cfg + mcfg, dep or mdep)}impl {path} :: pub {m}")
            texts.append((path, mod, [m]))

    def visit(module, path, cfg, dep, stack):
        if id(module) in stack:
            return
        stack = stack | {id(module)}
        lines.append(f"{prefix(cfg, dep)}pub mod {path}")
        for name, its in sorted(module.items.items()):
            for it in its:
                if not it.pub:
                    continue
                if it.kind == "mod":
                    visit(it.target, f"{path}::{name}", cfg + it.cfg, dep or it.deprecated, stack)
                else:
                    emit(f"{path}::{name}", it, cfg + it.cfg, dep)
        for u in module.uses:
            if not u.pub:
                continue
            if u.glob:
                target = r.resolve_module(module, u.segs)
                if target is None:
                    raise SyntaxError(f"glob of unknown module {'::'.join(u.segs)}")
                for name, its in sorted(target.items.items()):
                    for it in its:
                        if it.pub and it.kind != "mod":
                            emit(f"{path}::{name}", it, cfg + u.cfg + it.cfg, dep)
                for v in target.uses:
                    if v.pub and not v.glob:
                        for it, c in r.resolve(target, v.segs):
                            emit(f"{path}::{v.alias or v.segs[-1]}", it,
                                 cfg + u.cfg + v.cfg + c, dep)
                continue
            name = u.alias or u.segs[-1]
            found = r.resolve(module, u.segs)
            if not found:
                emit(f"{path}::{name}", Item("extern", name, True, [], module,
                                             "::".join(u.segs)), cfg + u.cfg, dep or u.deprecated)
            for it, c in found:
                if it.kind == "mod":
                    visit(it.target if hasattr(it, "target") else it.module, f"{path}::{name}",
                          cfg + u.cfg + c, dep or u.deprecated, stack)
                else:
                    emit(f"{path}::{name}", it, cfg + u.cfg + c + it.cfg, dep or u.deprecated)

    visit(root, CRATE, [], False, frozenset())
    # Types a public signature names that no public path reaches.
    hidden = set()
    for path, module, sigs in texts:
        for sig in sigs:
            names = [[n] for n in set(re.findall(r"(?<!::)\b[A-Z][A-Za-z0-9_]*\b", sig))]
            names += [p.split("::") for p in set(re.findall(r"\bcrate(?:::\w+)+", sig))]
            for segs in names:
                name = segs[-1]
                for it, _ in r.resolve(module, segs):
                    if it.kind in ("struct", "enum", "trait", "type", "union") and \
                            id(it) not in items:
                        hidden.add(f"{path}: {'::'.join(it.module.path + [name])}")
    surface.origin = origin
    return lines, items, sorted(hidden)


def all_modules(m):
    yield m
    for its in m.items.values():
        for it in its:
            if it.kind == "mod":
                yield from all_modules(it.target)


def main():
    root = load([], SRC / "lib.rs")
    lines, items, hidden = surface(root)
    ordered = []
    # Keep each item's member lines under it: sort blocks, not lines.
    blocks, cur = [], []
    for line in lines:
        if not line.startswith("  ") and cur:
            blocks.append(cur)
            cur = []
        cur.append(line)
    if cur:
        blocks.append(cur)
    seen = set()
    for b in sorted(blocks, key=lambda b: path_key(b[0])):
        t = tuple(b)
        if t not in seen:
            seen.add(t)
            ordered.extend(b)
    text = "\n".join(ordered) + "\n"
    top = [line for line in ordered
           if not line.startswith("  ")
           and not re.sub(r"^(#\[[^\]]*\]\]? )*", "", line).startswith("pub mod ")]
    arg = sys.argv[1] if len(sys.argv) > 1 else ""
    if arg == "--count":
        print(f"{len(top)} public paths, {len(items)} distinct items, "
              f"{len(ordered)} lines with members")
    elif arg == "--origins":
        for path, where in sorted(set(surface.origin)):
            print(f"{path}\t{where}")
    elif arg == "--hidden":
        print("\n".join(hidden))
    elif arg == "--write":
        LIST.write_text(text)
        print(f"wrote {LIST.relative_to(ROOT)}: {len(top)} public paths")
    elif arg == "--check":
        hidden = [h for h in hidden if h not in HIDDEN_ALLOWED]
        if hidden:
            print("public signatures name types that no public path reaches:\n  "
                  + "\n  ".join(hidden), file=sys.stderr)
            sys.exit(1)
        old = LIST.read_text() if LIST.is_file() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True),
                "docs/public-api.txt", "the source (.ci/public-api.py)"))
            print("\nThe public API changed: if that is meant, run .ci/public-api.py --write, "
                  "add the change to CHANGELOG.md, and commit both.", file=sys.stderr)
            sys.exit(1)
        print(f"docs/public-api.txt matches the source: {len(top)} public paths")
    else:
        sys.stdout.write(text)


def path_key(line):
    body = re.sub(r"^(#\[[^\]]*\]\]? )*", "", line)
    m = re.search(rf"\b{CRATE}(::\w+)*", body)
    return (m.group() if m else body, body)


if __name__ == "__main__":
    main()
