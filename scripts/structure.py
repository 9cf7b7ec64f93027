#!/usr/bin/env python3
"""Measure what issue 35 bounds in each crate: import cycles, production
file sizes and production function sizes. Run by .ci/run; exits 1 when a
bound is broken.

What it counts, and how:

* **Production code** is everything a crate compiles outside tests. An item
  under `#[cfg(test)]` (a `mod tests { ... }`, a helper `fn`, an `impl`) is
  cut out, from its attribute to its closing brace, and a file reached only
  through such an item (`#[cfg(test)] mod tests;`, `#[path = "x_tests.rs"]`)
  is not production at all. Comments, string and char literals are lexed
  (raw strings, nested block comments, lifetimes), so nothing inside them
  is taken for code.
* **File size** is the file's lines, as `wc -l` counts them, less the lines
  of its test items. A file may carry `// size: <why it must be so>` in
  the comment block at its top to be allowed past the bound.
* **Function size** is the lines from the `fn` keyword to the closing
  brace, blank lines and comments included (what a reader scrolls through).
  A `// size: <why>` comment in the lines right above the `fn` (among its
  doc comment and attributes) allows it past the bound.
* **Import graph**: file A -> file B when A's production code names an item
  *defined* in B, through a `use` (crate::, super::, self::, or a name in
  scope), an inline path (`crate::x::f()`, `super::T`, `child::f()`, or a
  path through a module that a `use` brought in), or a glob import whose
  target defines a name the file uses. Re-exports are followed to the file
  that defines the item, so a `mod.rs` that only re-exports (`pub use`) is
  not a hop; an import that the file's code never mentions is no edge
  (traits count whenever imported: their methods are called by name).
  A file naming an item of a module that *encloses* it (its parent, the
  crate root) is no edge: a module's parts speak its words, as
  `telegram/polling.rs` uses `super::TelegramChannel`; the parent calling
  into its parts is an edge. A **cycle** is a strongly connected component
  of more than one file: rooms that reach into each other.

Bounds: at most 2 cycles per crate, no production file over 600 lines, no
production function over 100 lines.

Usage: scripts/structure.py [--root DIR] [--edges] [--check] [--self-test]
  --edges      also print the edges inside each cycle (name and line), to
               see which import closes it.
  --check      exit 1 when a bound is broken (what CI runs).
  --self-test  first run the lexer and graph on a small crate made to fool
               them (paths in comments, strings, raw strings, test modules).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field

# The crates measured, by name and root files (the first is the library).
CRATES = [
    ("mnemo", "src", ["lib.rs", "main.rs"]),
    ("mnemo-sessions", "sessions/src", ["lib.rs"]),
    ("mnemo-pg", "pg/src", ["lib.rs"]),
    ("mnemo-channels", "channels/src", ["lib.rs"]),
    ("mnemo-testkit", "testkit/src", ["lib.rs"]),
]

MAX_CYCLES = 2
MAX_FILE_LINES = 600
MAX_FN_LINES = 100

SIZE_NOTE = re.compile(r"^\s*//[/!]?\s*size:\s*\S")

ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}
MODIFIERS = {"pub", "unsafe", "async", "extern", "default", "const", "safe"}
KEYWORDS = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else",
    "enum", "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop",
    "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self",
    "static", "struct", "super", "trait", "true", "type", "unsafe", "use",
    "where", "while", "union", "macro_rules",
}


# --------------------------------------------------------------------------
# Lexing


@dataclass
class Tok:
    kind: str  # "ident", "punct", "lit", "life"
    text: str
    line: int


@dataclass
class Lexed:
    toks: list[Tok]
    nlines: int


def lex(src: str) -> Lexed:
    toks: list[Tok] = []
    i, n, line = 0, len(src), 1

    def newlines(a: int, b: int) -> int:
        return src.count("\n", a, b)

    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += newlines(i, j)
            i = j
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            word = src[i:j]
            # Raw strings: r"..", r#".."#, br#".."#, cr"..".
            if word in ("r", "br", "cr") and j < n and src[j] in "\"#":
                k = j
                while k < n and src[k] == "#":
                    k += 1
                if k < n and src[k] == '"':
                    hashes = k - j
                    end = src.find('"' + "#" * hashes, k + 1)
                    end = n if end < 0 else end + 1 + hashes
                    toks.append(Tok("lit", src[i:end], line))
                    line += newlines(i, end)
                    i = end
                    continue
                if word == "r" and src[j] == "#":  # raw identifier r#ident
                    k = j + 1
                    while k < n and (src[k].isalnum() or src[k] == "_"):
                        k += 1
                    toks.append(Tok("ident", src[j + 1 : k], line))
                    i = k
                    continue
            if word in ("b", "c") and j < n and src[j] in "\"'":
                i = j  # the literal follows; lexed below with its prefix dropped
                c = src[i]
            else:
                toks.append(Tok("ident", word, line))
                i = j
                continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("lit", src[i : j + 1], line))
            line += newlines(i, j + 1)
            i = j + 1
            continue
        if c == "'":
            # A char literal ('x', '\n', '\u{..}', '\'') or a lifetime/label.
            if i + 1 < n and src[i + 1] == "\\":
                j = i + 2
                j += 1  # the escaped char
                while j < n and src[j] != "'":
                    j += 1
                toks.append(Tok("lit", "char", line))
                i = j + 1
                continue
            if i + 2 < n and src[i + 2] == "'":
                toks.append(Tok("lit", "char", line))
                i += 3
                continue
            j = i + 1
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            toks.append(Tok("life", src[i:j], line))
            i = j
            continue
        if c.isdigit():
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_" or
                             (src[j] == "." and j + 1 < n and src[j + 1].isdigit())):
                j += 1
            toks.append(Tok("lit", "num", line))
            i = j
            continue
        if src.startswith("::", i):
            toks.append(Tok("punct", "::", line))
            i += 2
            continue
        if src.startswith("->", i) or src.startswith("=>", i):
            toks.append(Tok("punct", src[i : i + 2], line))
            i += 2
            continue
        toks.append(Tok("punct", c, line))
        i += 1
    nlines = src.count("\n") + (0 if src.endswith("\n") or not src else 1)
    return Lexed(toks, nlines)


def match_close(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at toks[i]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    opening = toks[i].text
    closing = pairs[opening]
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j]
        if t.kind != "punct":
            continue
        if t.text == opening:
            depth += 1
        elif t.text == closing:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def item_end(toks: list[Tok], i: int) -> int:
    """Index of the last token of the item starting at toks[i]: its `;`
    at bracket depth 0, or the brace closing its first `{` there."""
    depth = 0
    j = i
    while j < len(toks):
        t = toks[j]
        if t.kind == "punct":
            if t.text in "([":
                depth += 1
            elif t.text in ")]":
                depth -= 1
            elif t.text == "{":
                if depth == 0:
                    return match_close(toks, j)
                depth += 1
            elif t.text == "}":
                depth -= 1
            elif t.text == ";" and depth == 0:
                return j
        j += 1
    return len(toks) - 1


def is_test_attr(toks: list[Tok], i: int, close: int) -> bool:
    """`#[cfg(test)]` or `#[cfg(all(test, ..))]` at toks[i] (`#`)."""
    body = [t.text for t in toks[i + 2 : close]]
    if body[:3] != ["cfg", "(", "test"] and body[:5] != ["cfg", "(", "all", "(", "test"]:
        return False
    return True


def path_attr(toks: list[Tok], i: int) -> str | None:
    """The value of `#[path = "..."]` whose `#` is toks[i]."""
    if [t.text for t in toks[i + 2 : i + 4]] != ["path", "="] or i + 4 >= len(toks):
        return None
    lit = toks[i + 4]
    return lit.text.strip('"') if lit.kind == "lit" and lit.text.startswith('"') else None


def strip_tests(toks: list[Tok]) -> tuple[list[Tok], list[tuple[int, int]]]:
    """Drop `#[cfg(test)]` items (and with them any `mod x;` whose file is
    then never read). Returns the production tokens and the line ranges
    dropped."""
    kept: list[Tok] = []
    dropped: list[tuple[int, int]] = []
    i = 0
    # An inner `#![cfg(test)]` makes the whole file test code.
    while i < len(toks):
        t = toks[i]
        if t.kind == "punct" and t.text == "#" and i + 1 < len(toks):
            inner = toks[i + 1].text == "!"
            b = i + 2 if inner else i + 1
            if b < len(toks) and toks[b].text == "[":
                close = match_close(toks, b)
                if is_test_attr(toks, b - 1, close):
                    if inner:
                        return [], [(1, 10**9)]
                    end = item_end(toks, close + 1)
                    dropped.append((t.line, toks[end].line))
                    i = end + 1
                    continue
        kept.append(t)
        i += 1
    return kept, dropped


# --------------------------------------------------------------------------
# Modules, items and imports


@dataclass
class Use:
    segs: list[str]  # the path, e.g. ["crate", "config", "Config"]
    name: str | None  # the name it binds (None for a glob)
    glob: bool
    line: int


@dataclass
class Module:
    path: tuple[str, ...]
    file: str
    parent: "Module | None"
    items: dict[str, str] = field(default_factory=dict)  # name -> kind
    children: dict[str, "Module"] = field(default_factory=dict)
    uses: list[Use] = field(default_factory=list)

    def name(self) -> str:
        return "::".join(self.path) or "crate"


@dataclass
class FnSize:
    name: str
    file: str
    line: int
    lines: int
    excused: bool


@dataclass
class FileInfo:
    path: str  # relative to the repo root
    module: Module
    raw: str
    lexed: Lexed
    toks: list[Tok]  # production tokens
    prod_lines: int
    excused: bool
    fns: list[FnSize] = field(default_factory=list)
    idents: set[str] = field(default_factory=set)  # identifiers outside `use`
    paths: list[tuple[list[str], int, "Module"]] = field(default_factory=list)


def parse_use_tree(toks: list[Tok], i: int, prefix: list[str], out: list[tuple[list[str], str | None, bool, int]]) -> int:
    """Parse a use tree starting at toks[i]; append (segs, binding, glob,
    line). Returns the index after the tree."""
    segs = list(prefix)
    line = toks[i].line if i < len(toks) else 0
    if i < len(toks) and toks[i].text == "::":
        i += 1  # leading `::`: an extern crate
        segs.append("::")
    while i < len(toks):
        t = toks[i]
        if t.text == "{":
            close = match_close(toks, i)
            j = i + 1
            while j < close:
                j = parse_use_tree(toks, j, segs, out)
                if j < close and toks[j].text == ",":
                    j += 1
            return close + 1
        if t.text == "*":
            out.append((segs, None, True, t.line))
            return i + 1
        if t.kind == "ident":
            segs.append(t.text)
            i += 1
            if i < len(toks) and toks[i].text == "::":
                i += 1
                continue
            name = segs[-1]
            if name == "self":
                segs = segs[:-1]
                name = segs[-1] if segs else None
            if i < len(toks) and toks[i].text == "as":
                name = toks[i + 1].text
                i += 2
            out.append((segs, name, False, line))
            return i
        return i + 1
    return i


def item_start(toks: list[Tok], i: int) -> bool:
    """Whether toks[i] begins an item: the significant token before it,
    skipping visibility and modifiers, ends a previous item or attribute."""
    j = i - 1
    while j >= 0:
        t = toks[j]
        if t.kind == "ident" and t.text in MODIFIERS:
            j -= 1
            continue
        if t.kind == "lit" and t.text.startswith('"'):  # extern "C"
            j -= 1
            continue
        if t.text == ")":
            # pub(crate), pub(super), pub(in path)
            k = j
            while k >= 0 and toks[k].text != "(":
                k -= 1
            if k >= 1 and toks[k - 1].text == "pub":
                j = k - 1
                continue
            return False
        return t.text in (";", "}", "{", "]")
    return True


def scan_module_items(info: FileInfo, root_mod: Module, resolve_child) -> None:
    """Walk the production tokens of one file: items, uses, inline modules,
    functions and their sizes, identifiers and inline paths."""
    toks = info.toks
    # (module, brace depth at which its items sit)
    mods: list[tuple[Module, int]] = [(root_mod, 0)]
    # (name prefix for fns, depth at which the block closes)
    owners: list[tuple[str, int]] = []
    depth = 0
    in_use_until = -1
    pending_path: str | None = None
    i = 0
    while i < len(toks):
        t = toks[i]
        mod, mdepth = mods[-1]
        if t.kind == "punct":
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1
                while len(mods) > 1 and depth < mods[-1][1]:
                    mods.pop()
                while owners and depth < owners[-1][1]:
                    owners.pop()
            elif t.text == "#" and i + 1 < len(toks) and toks[i + 1].text == "[":
                close = match_close(toks, i + 1)
                p = path_attr(toks, i)
                if p is not None:
                    pending_path = p
                i = close + 1
                continue
            i += 1
            continue
        if t.kind != "ident":
            i += 1
            continue
        info.idents.add(t.text)
        if (i == 0 or toks[i - 1].text != "::") and i + 1 < len(toks) and toks[i + 1].text == "::":
            info.paths.append((read_path(toks, i), t.line, mod))
        at_mod_level = depth == mdepth
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.text == "use" and item_start(toks, i):
            end = item_end(toks, i)
            trees: list[tuple[list[str], str | None, bool, int]] = []
            parse_use_tree(toks, i + 1, [], trees)
            for segs, name, glob, line in trees:
                mod.uses.append(Use(segs, name, glob, line))
            i = end + 1
            continue
        if t.text == "mod" and at_mod_level and nxt and nxt.kind == "ident" and item_start(toks, i):
            name = nxt.text
            after = toks[i + 2] if i + 2 < len(toks) else None
            if after is not None and after.text == "{":
                child = Module(mod.path + (name,), info.path, mod)
                mod.children[name] = child
                mod.items[name] = "mod"
                mods.append((child, depth + 1))
                pending_path = None
                i += 2
                continue
            resolve_child(mod, name, pending_path, info)
            mod.items[name] = "mod"
            pending_path = None
            i += 3
            continue
        if t.text == "macro_rules" and nxt and nxt.text == "!" and at_mod_level:
            if i + 2 < len(toks):
                mod.items[toks[i + 2].text] = "macro"
            i += 3
            continue
        if t.text in ("impl", "trait") and item_start(toks, i):
            # Functions inside are named by the block's type.
            if t.text == "trait" and at_mod_level and nxt and nxt.kind == "ident":
                mod.items[nxt.text] = "trait"
            name, block = block_owner(toks, i)
            if block is not None:
                owners.append((name, depth + 1))
            i += 1
            continue
        if t.text in ITEM_KEYWORDS and nxt and nxt.kind == "ident" and item_start(toks, i):
            if at_mod_level and nxt.text not in ("fn", "_", "mut"):
                mod.items[nxt.text] = t.text
            elif at_mod_level and t.text == "static" and nxt.text == "mut":
                mod.items[toks[i + 2].text] = "static"
        if t.text == "fn" and nxt and nxt.kind == "ident":
            # A function with a body: from `fn` to its closing brace.
            end = item_end(toks, i)
            if toks[end].text == "}":
                lines = toks[end].line - t.line + 1
                prefix = "::".join(mod.path)
                owner = owners[-1][0] if owners else None
                qual = "::".join(p for p in (prefix, owner, nxt.text) if p)
                info.fns.append(FnSize(qual, info.path, t.line, lines, excused_above(info, t.line)))
            i += 2
            continue
        i += 1


def block_owner(toks: list[Tok], i: int) -> tuple[str, int | None]:
    """The type an `impl` or `trait` block at toks[i] is about (`impl A for
    B`: B; `impl a::B<T>`: B; `trait T: U`: T), and the index of its `{`
    (None for a declaration without a block)."""
    names: list[str] = []
    angle = 0
    j = i + 1
    while j < len(toks):
        t = toks[j]
        if t.text == "<":
            angle += 1
        elif t.text == ">":
            angle -= 1
        elif angle == 0 and t.text in ("{", ";", "where"):
            break
        elif angle == 0 and t.kind == "ident" and t.text not in ("dyn", "unsafe", "const"):
            names.append(t.text)
        j += 1
    while j < len(toks) and toks[j].text not in ("{", ";"):
        j += 1  # past a `where` clause
    block = j if j < len(toks) and toks[j].text == "{" else None
    if toks[i].text == "trait":
        name = names[0] if names else "?"
    elif "for" in names and names.index("for") + 1 < len(names):
        name = names[names.index("for") + 1]
    else:
        name = names[-1] if names else "?"
    return name, block


def excused_above(info: FileInfo, line: int) -> bool:
    """A `// size:` comment in the block of comments and attributes right
    above `line` (a blank line or other code ends the block)."""
    raw_lines = info.raw.split("\n")
    k = line - 2  # 0-based index of the line above
    while k >= 0:
        s = raw_lines[k].strip()
        if SIZE_NOTE.match(s):
            return True
        if s.startswith("//") or s.startswith("#") or (s and s[-1] in ",(" ) or s in (")]", "]"):
            k -= 1
            continue
        return False
    return False


def read_path(toks: list[Tok], i: int) -> list[str]:
    """The path `a::b::c` starting at toks[i] (turbofish skipped)."""
    segs = [toks[i].text]
    j = i + 1
    while j + 1 < len(toks) and toks[j].text == "::":
        nx = toks[j + 1]
        if nx.kind == "ident":
            segs.append(nx.text)
            j += 2
        elif nx.text == "<":  # Vec::<T>::new
            depth = 0
            j += 1
            while j < len(toks):
                if toks[j].text == "<":
                    depth += 1
                elif toks[j].text == ">":
                    depth -= 1
                    if depth == 0:
                        j += 1
                        break
                j += 1
        else:
            break
    return segs


def excused_file(raw: str) -> bool:
    for s in raw.split("\n"):
        s = s.strip()
        if SIZE_NOTE.match(s):
            return True
        if s and not s.startswith("//") and not s.startswith("#!"):
            return False
    return False


# --------------------------------------------------------------------------
# Crate loading and name resolution


class Crate:
    def __init__(self, repo: str, name: str, src_dir: str, roots: list[str]):
        self.repo = repo
        self.name = name
        self.src_dir = src_dir
        self.files: dict[str, FileInfo] = {}
        self.test_files: set[str] = set()
        self.root: Module | None = None
        for k, r in enumerate(roots):
            path = os.path.join(src_dir, r)
            if os.path.exists(os.path.join(repo, path)):
                m = Module((), path, None)
                if k == 0:
                    self.root = m
                self.load(path, m)

    def load(self, path: str, module: Module) -> None:
        if path in self.files:
            return
        with open(os.path.join(self.repo, path), encoding="utf-8") as f:
            raw = f.read()
        lexed = lex(raw)
        toks = lexed.toks
        prod, dropped = strip_tests(toks)
        dropped_lines = sum(min(b, lexed.nlines) - a + 1 for a, b in dropped)
        info = FileInfo(path, module, raw, lexed, prod, lexed.nlines - dropped_lines, excused_file(raw))
        self.files[path] = info

        def resolve_child(parent: Module, name: str, attr_path: str | None, finfo: FileInfo):
            here = os.path.dirname(finfo.path)
            base = os.path.basename(finfo.path)
            is_mod_rs = base in ("mod.rs", "lib.rs", "main.rs")
            # Inline modules nest their files one folder deeper.
            inline = parent.file == finfo.path and parent is not finfo.module
            if attr_path is not None:
                child_path = os.path.normpath(os.path.join(here, attr_path))
            else:
                d = here if is_mod_rs else os.path.join(here, base[:-3])
                if inline:
                    rel = parent.path[len(finfo.module.path):]
                    d = os.path.join(d, *rel)
                cand = [os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")]
                child_path = next((c for c in cand if os.path.exists(os.path.join(self.repo, c))), cand[0])
            child = Module(parent.path + (name,), child_path, parent)
            parent.children[name] = child
            if os.path.exists(os.path.join(self.repo, child_path)):
                self.load(child_path, child)

        scan_module_items(info, module, resolve_child)

    # --- resolution -------------------------------------------------------

    def lookup(self, mod: Module, name: str, seen: set) -> tuple | None:
        """What `name` means inside `mod`: ("item", module, kind) or
        ("module", module), following imports; None if outside the crate."""
        key = (id(mod), name)
        if key in seen:
            return None
        seen = seen | {key}
        if name in mod.children:
            return ("module", mod.children[name])
        if name in mod.items:
            return ("item", mod, mod.items[name])
        for u in mod.uses:
            if not u.glob and u.name == name:
                return self.resolve(mod, u.segs, seen)
        for u in mod.uses:
            if u.glob:
                target = self.resolve(mod, u.segs, seen)
                if target and target[0] == "module":
                    r = self.lookup(target[1], name, seen)
                    if r is not None:
                        return r
        return None

    def resolve(self, mod: Module, segs: list[str], seen: set = frozenset()) -> tuple | None:
        if not segs:
            return ("module", mod)
        first, rest = segs[0], segs[1:]
        if first == "::":
            return None
        if first == "crate":
            cur = ("module", self.root)
        elif first == "self":
            cur = ("module", mod)
        elif first == "super":
            cur = ("module", mod.parent) if mod.parent else None
        elif first == "Self":
            return None
        else:
            cur = self.lookup(mod, first, seen)
        for s in rest:
            if cur is None or cur[0] == "item":
                return cur
            m = cur[1]
            if s == "super":
                cur = ("module", m.parent) if m.parent else None
            elif s == "self":
                continue
            else:
                cur = self.lookup(m, s, seen)
        return cur


def encloses(outer: Module, inner: Module) -> bool:
    """Whether `outer` is a proper ancestor of `inner`."""
    return len(outer.path) < len(inner.path) and inner.path[: len(outer.path)] == outer.path


def all_modules(m: Module):
    yield m
    for c in m.children.values():
        yield from all_modules(c)


def build_graph(crate: Crate) -> dict[str, dict[str, list[str]]]:
    """file -> {file it depends on -> [why, ...]}."""
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in crate.prod_files()}
    mods_by_file: dict[str, list[Module]] = {}
    for m in all_modules(crate.root):
        mods_by_file.setdefault(m.file, []).append(m)
    for path in graph:
        info = crate.files[path]

        def edge(target: tuple | None, why: str):
            if target is None or target[0] != "item":
                return
            owner = target[1]
            tf = owner.file
            if tf == path or tf not in graph:
                return
            # A module's parts may use the words of the module that holds
            # them (its parent, the crate root): no edge up to an ancestor.
            if encloses(owner, m):
                return
            graph[path].setdefault(tf, []).append(why)

        for m in mods_by_file.get(path, []):
            bound = set(m.items) | set(m.children)
            for u in m.uses:
                if u.glob:
                    continue
                bound.add(u.name)
                r = crate.resolve(m, u.segs)
                if r is None or r[0] != "item":
                    continue
                used = u.name in info.idents or u.name == "_" or r[2] == "trait"
                if used:
                    edge(r, f"use {'::'.join(u.segs)} (line {u.line})")
            # Glob imports: the names this file uses that the glob brings.
            for u in m.uses:
                if not u.glob:
                    continue
                tgt = crate.resolve(m, u.segs)
                if not tgt or tgt[0] != "module":
                    continue
                for name in info.idents - bound - KEYWORDS:
                    r = crate.lookup(tgt[1], name, set())
                    if r and r[0] == "item":
                        edge(r, f"use {'::'.join(u.segs)}::* for {name} (line {u.line})")
            # Inline paths: crate::x::f, super::T, child::f, alias::f.
            for segs, line, pm in info.paths:
                if pm is not m:
                    continue
                if segs[0] not in ("crate", "super", "self") and segs[0] not in bound:
                    continue
                r = crate.resolve(m, segs)
                # A path through an imported item (Foo::new) is that import's edge.
                edge(r, f"{'::'.join(segs)} (line {line})")
    return graph


def crate_prod_files(self: Crate) -> list[str]:
    return sorted(p for p in self.files if p not in self.test_files)


Crate.prod_files = crate_prod_files


def sccs(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


# --------------------------------------------------------------------------
# Report


def measure(repo: str, edges: bool):
    """The table rows, the detail lines and the failures."""
    failures: list[str] = []
    rows = []
    details: list[str] = []
    for name, src_dir, roots in CRATES:
        crate = Crate(repo, name, src_dir, roots)
        files = crate.prod_files()
        graph = build_graph(crate)
        cycles = sccs(graph)
        lines = sum(crate.files[p].prod_lines for p in files)
        big_file = max(files, key=lambda p: crate.files[p].prod_lines)
        fns = [f for p in files for f in crate.files[p].fns]
        big_fn = max(fns, key=lambda f: f.lines) if fns else None

        def rel(p: str, src_dir: str = src_dir) -> str:
            return os.path.relpath(p, src_dir)

        rows.append((
            name, len(files), lines, len(cycles),
            f"{rel(big_file)} {crate.files[big_file].prod_lines}",
            f"{big_fn.name} {big_fn.lines}" if big_fn else "-",
        ))
        for k, comp in enumerate(cycles, 1):
            details.append(f"{name} cycle {k} ({len(comp)} files): " + ", ".join(rel(p) for p in comp))
            if edges:
                for a in comp:
                    for b, whys in sorted(graph[a].items()):
                        if b in comp:
                            details.append(f"    {rel(a)} -> {rel(b)}: " + "; ".join(sorted(set(whys))[:4]))
        if len(cycles) > MAX_CYCLES:
            failures.append(f"{name}: {len(cycles)} import cycles (at most {MAX_CYCLES}; run with --edges "
                            "to see which imports close them)")
        for p in files:
            info = crate.files[p]
            if info.prod_lines <= MAX_FILE_LINES:
                continue
            note = " (excused: // size:)" if info.excused else ""
            details.append(f"{name} file over {MAX_FILE_LINES}: {p} {info.prod_lines}{note}")
            if not info.excused:
                failures.append(f"{p}: {info.prod_lines} production lines (at most {MAX_FILE_LINES}; "
                                "split it, or say why it must be so in a `// size:` comment at its top)")
        for f in sorted(fns, key=lambda f: -f.lines):
            if f.lines <= MAX_FN_LINES:
                continue
            note = " (excused: // size:)" if f.excused else ""
            details.append(f"{name} fn over {MAX_FN_LINES}: {f.name} {f.lines} ({f.file}:{f.line}){note}")
            if not f.excused:
                failures.append(f"{f.file}:{f.line}: fn {f.name} is {f.lines} lines (at most {MAX_FN_LINES}; "
                                "split it, or say why it must be so in a `// size:` comment above it)")
    return rows, details, failures


# A crate made to fool the lexer: paths in comments, strings, raw strings
# and char literals, a brace in a string, lifetimes, a test module.
SELF_TEST = {
    "src/lib.rs": """//! use crate::b::B; in a doc comment is no edge
mod a;
mod b;
mod c;
/* use crate::c::C; /* nested */ still a comment */
""",
    "src/a.rs": """use crate::b::B;
const S: &str = "use crate::c::C; crate::c::f() \\" crate::c::f()";
const R: &str = r#"crate::c::f() " still raw"#;
const Q: char = '"';
const E: char = '\\'';
pub fn a<'x>(b: &'x B) -> &'x B { let _ = "}"; b }
#[cfg(test)]
mod tests {
    use crate::c::C;
    fn t(_: C) {}
}
""",
    "src/b.rs": """pub struct B;
pub fn f() { crate::a::a(&B); }
""",
    "src/c.rs": """pub struct C;
pub fn f() {}
/// A table, on purpose.
// size: one arm per code, in the order of the spec
#[allow(dead_code)]
fn table() {
""" + "    let _ = 0;\n" * 100 + """}
fn long() {
""" + "    let _ = 0;\n" * 100 + """}
""",
}


def self_test() -> None:
    """The lexer and the graph on SELF_TEST: only a <-> b is an edge."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for path, text in SELF_TEST.items():
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(d, path), "w", encoding="utf-8") as f:
                f.write(text)
        crate = Crate(d, "t", "src", ["lib.rs"])
        graph = build_graph(crate)
        got = {(a, b) for a, bs in graph.items() for b in bs}
        want = {("src/a.rs", "src/b.rs"), ("src/b.rs", "src/a.rs")}
        assert got == want, f"edges {sorted(got)} != {sorted(want)}"
        assert sccs(graph) == [["src/a.rs", "src/b.rs"]], sccs(graph)
        a = crate.files["src/a.rs"]
        assert a.prod_lines == 6, a.prod_lines
        assert [(f.name, f.lines) for f in a.fns] == [("a::a", 1)], a.fns
        c = {f.name: (f.lines, f.excused) for f in crate.files["src/c.rs"].fns}
        assert c == {"c::f": (1, False), "c::table": (102, True), "c::long": (102, False)}, c
    print("structure: self-test passed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--edges", action="store_true", help="print the edges inside each cycle")
    ap.add_argument("--check", action="store_true", help="exit 1 when a bound is broken")
    ap.add_argument("--self-test", action="store_true", help="first test the lexer and graph on a made-up crate")
    args = ap.parse_args()
    if args.self_test:
        self_test()
    repo = os.path.normpath(args.root)
    rows, details, failures = measure(repo, args.edges)

    head = ("crate", "files", "prod lines", "cycles", "largest file", "largest fn")
    widths = [max(len(str(r[k])) for r in rows + [head]) for k in range(len(head))]

    def fmt(r) -> str:
        return "  ".join(str(c).ljust(w) if k in (0, 4, 5) else str(c).rjust(w)
                         for k, (c, w) in enumerate(zip(r, widths))).rstrip()

    print(fmt(head))
    for r in rows:
        print(fmt(r))
    if details:
        print()
        print("\n".join(details))
    if failures:
        print()
        print("structure: bounds broken (issue 35: cycles, file and function sizes):")
        for f in failures:
            print(f"  {f}")
        return 1 if args.check else 0
    print()
    print("structure: within bounds")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `structure.py | head`: the reader has what it wanted.
        sys.stderr.close()
        sys.exit(0)
