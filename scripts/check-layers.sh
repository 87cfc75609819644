#!/usr/bin/env bash
# The layering check (issue 29, point 7; docs/architecture.md): fails, naming
# each offending file:line and the rule it breaks, when in crates/nagare/src
#
#   1. a top-level module uses one above it in LAYERS (below; the order of
#      the module comment of crates/nagare/src/lib.rs, lowest first);
#   2. a circle appears among top-level modules (modules of one layer may use
#      each other, but not both ways round, directly or through others);
#   3. a plugin uses a sibling plugin: a file of inputs/, filters/ or
#      outputs/ names another plugin of one of those three folders (one
#      layer), or a parser of parsers/ another parser, rather than the
#      folder's module (its mod.rs: registry, contracts, inline helpers) or a
#      module the folder shares (SHARED below: `inputs/common`, ...). A
#      plugin may use a parser (parsers/ is a layer below the plugins).
#
# It reads every file under crates/nagare/src (and those `#[path]` brings
# in), drops comments and string literals, and resolves
# each `crate::a::b…` and `super::…` path (in `use` lines, with their
# `{…}` groups, and in expressions) to a module path; `super` is resolved
# from the module it is written in, inline `mod tests { … }` included.
# `#[cfg(test)]` code counts like any other: a test that needs an upper
# layer belongs to that layer (or to tests/).
#
# nagare-core is a crate of its own and depends only on nagare-forward:
# cargo already refuses a circle between crates, so the check need not.
#
# Before the check, a self-test plants one breach of each rule in a copy of
# the tree and fails unless the check names each one (so a parser that
# stopped finding paths cannot pass quietly).
#
# Written in Python (standard library only) for the path parsing; the two
# runs take about a second. Usage: bash scripts/check-layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=$(cat <<'PY'
import os
import re
import sys

# Lowest first; modules on one line are one layer. Keep in step with the
# module comment of crates/nagare/src/lib.rs (every `mod` there must be here).
LAYERS = [
    ["logging", "formats", "parsers", "net", "proto", "convert"],
    ["buffer"],
    ["router"],
    ["inputs", "filters", "outputs"],
    ["config"],
    ["topology", "test_tables"],
    ["monitor"],
    ["daemon"],
    ["cli"],
]
# Plugin folders, and the modules in each that plugins share (not plugins).
SHARED = {
    "inputs": {"common"},
    "filters": {"common"},
    "outputs": {"common"},
    "parsers": {"common", "options"},
}

RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def clean(text):
    """Blanks comments, string and char literals, keeping every newline."""
    out = []
    i, n = 0, len(text)
    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j])); i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j): depth += 1; j += 2
                elif text.startswith("*/", j): depth -= 1; j += 2
                else: j += 1
            out.append(blank(text[i:j])); i = j
        else:
            m = re.compile(r'b?r(#*)"').match(text, i)
            if m and (i == 0 or not (text[i-1].isalnum() or text[i-1] == "_")):
                end = text.find('"' + m.group(1), m.end())
                end = n if end < 0 else end + 1 + len(m.group(1))
                out.append(blank(text[i:end])); i = end
            elif c == '"' or (c == "b" and text.startswith('b"', i)
                              and (i == 0 or not (text[i-1].isalnum() or text[i-1] == "_"))):
                j = i + (2 if c == "b" else 1)
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                out.append(blank(text[i:j+1])); i = j + 1
            elif c == "'":
                m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'").match(text, i)
                if m:
                    out.append(blank(m.group(0))); i = m.end()
                else:  # a lifetime or a label
                    out.append(c); i += 1
            else:
                out.append(c); i += 1
    return "".join(out)


TOKEN = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*|::|[{}(),;*#\[\]]|\n|\S")


def tokens(text):
    line = 1
    for m in TOKEN.finditer(text):
        t = m.group(0)
        if t == "\n":
            line += 1
        else:
            yield t, line


class Module:
    def __init__(self, path, file, mod_rs):
        self.path, self.file, self.mod_rs = path, file, mod_rs


def children_dir(mod):
    d = os.path.dirname(mod.file)
    if mod.mod_rs:
        return d
    return os.path.join(d, os.path.splitext(os.path.basename(mod.file))[0])


def scan(mod, refs, modules):
    """Reads one module file: its `mod x;` children, its crate/super paths."""
    raw = open(mod.file, encoding="utf-8").read()
    text = clean(raw)
    path_attr = {}  # line of a `mod x;` -> its #[path] (strings are blanked in text)
    for m in re.finditer(r'#\[path\s*=\s*"([^"]+)"\]((?:\s*#\[[^\]]*\])*\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;)', raw):
        path_attr[m.group(3)] = m.group(1)
    toks = list(tokens(text))
    # inline modules: (name, brace depth at which it closes)
    stack, depth = [], 0
    i = 0
    def here():
        return mod.path + [s for s, _ in stack]
    def resolve_base(k):
        """Paths starting at toks[k] ('crate' or 'super'): (segments, next index)."""
        base = []
        if toks[k][0] == "crate":
            base, k = [], k + 1
        else:
            base = here()
            while toks[k][0] == "super" and k + 1 < len(toks) and toks[k+1][0] == "::":
                base = base[:-1]; k += 2
            k -= 1  # back onto the '::' after the last super
        return base, k
    def tree(k, prefix, out):
        """A use tree from toks[k]: appends full paths to out, returns next index."""
        if toks[k][0] == "{":
            k += 1
            while toks[k][0] != "}":
                k = tree(k, prefix, out)
                while toks[k][0] not in (",", "}"):  # `as name`, or what is not a path
                    k += 1
                if toks[k][0] == ",":
                    k += 1
            return k + 1
        segs = list(prefix)
        while True:
            t = toks[k][0]
            if t == "self":
                k += 1
            elif t == "*":
                k += 1
            elif re.match(r"[A-Za-z_]", t):
                segs.append(t); k += 1
            if k < len(toks) and toks[k][0] == "::":
                if toks[k+1][0] == "{":
                    return tree(k + 1, segs, out)
                if toks[k+1][0] == "<":  # turbofish
                    break
                k += 1
                continue
            break
        out.append(segs)
        return k
    while i < len(toks):
        t, line = toks[i]
        if t == "mod" and i + 2 < len(toks) and re.match(r"[A-Za-z_]", toks[i+1][0]):
            name, nxt = toks[i+1][0], toks[i+2][0]
            if nxt == "{":
                stack.append((name, depth + 1)); depth += 1; i += 3; continue
            if nxt == ";":
                d = children_dir(mod)
                for s, _ in stack:
                    d = os.path.join(d, s)
                if name in path_attr:
                    # relative to the file's directory; inside inline modules,
                    # to the directory their `mod x;` children would be in
                    f = os.path.normpath(os.path.join(d if stack else os.path.dirname(mod.file), path_attr[name]))
                    child = Module(here() + [name], f, False)
                elif os.path.exists(os.path.join(d, name + ".rs")):
                    child = Module(here() + [name], os.path.join(d, name + ".rs"), False)
                else:
                    child = Module(here() + [name], os.path.join(d, name, "mod.rs"), True)
                modules.append(child)
                i += 3; continue
        if t == "{":
            depth += 1
        elif t == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        elif t in ("crate", "super") and i + 1 < len(toks) and toks[i+1][0] == "::":
            base, k = resolve_base(i)
            out = []
            end = tree(k + 1, base, out) if toks[k][0] == "::" else k
            for segs in out:
                refs.append((mod, here(), line, segs))
            i = max(end, i + 1); continue
        i += 1


def main():
    lib = sys.argv[1]
    src = os.path.dirname(lib)
    # Every file under src/ by its place (`registry!` declares the plugins'
    # `mod x;` inside a macro), then those that `#[path]` brings in.
    modules, refs = [], []
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs") or (d == src and f == "main.rs"):
                continue  # main.rs is the binary, another crate
            rel = os.path.relpath(os.path.join(d, f), src)[:-3].split(os.sep)
            mod_rs = rel[-1] == "mod" or rel == ["lib"]
            path = rel[:-1] if mod_rs else rel
            modules.append(Module(path, os.path.join(d, f), mod_rs))
    modules.sort(key=lambda m: m.file)
    known = {os.path.normpath(m.file) for m in modules}
    k = 0
    while k < len(modules):
        found = []
        scan(modules[k], refs, found)
        for child in found:
            if os.path.normpath(child.file) not in known:
                if not os.path.exists(child.file):
                    sys.exit(f"check-layers: {child.file}: declared by {modules[k].file} but not found")
                known.add(os.path.normpath(child.file))
                modules.append(child)
        k += 1
    problems = []
    # lib.rs's comment names the layers in the same order as LAYERS.
    doc = [l for l in open(lib, encoding="utf-8") if l.startswith("//!")]
    start = next((i for i, l in enumerate(doc) if l.startswith("//! - ")), len(doc))
    named = []  # each bullet's modules: the names before its first ':'
    for bullet in "".join(doc[start:]).split("//! - "):
        named += re.findall(r"`(\w+)`", bullet.split(":")[0])
    flat = [m for layer in LAYERS for m in layer]
    if named != flat:
        problems.append(f"{lib}:1: the layers of its module comment ({', '.join(named)}) differ from LAYERS in scripts/check-layers.sh ({', '.join(flat)})")
    for m in modules:
        if len(m.path) == 1 and m.path[0] not in RANK:
            problems.append(f"{m.file}:1: top-level module `{m.path[0]}` is not in the layer list of scripts/check-layers.sh (and lib.rs's comment): place it")
    edges, found = {}, {}
    for mod, at, line, segs in refs:
        if not segs or not at:
            continue
        src, dst = at[0], segs[0]
        where = f"{mod.file}:{line}"
        shown = "crate::" + "::".join(segs)
        if dst != src and dst in RANK and src in RANK:
            edges.setdefault(src, {}).setdefault(dst, []).append(f"{where}: {shown}")
            if RANK[dst] > RANK[src]:
                found.setdefault((where, f"upward import: `{src}` (layer {RANK[src]}) uses `{dst}` (layer {RANK[dst]})", ""), []).append(shown)
        # rule 3: a plugin naming another plugin
        if src in SHARED and len(at) >= 2 and at[1] not in SHARED[src] \
                and dst in SHARED and len(segs) >= 2 and segs[1] not in SHARED[dst] \
                and RANK[src] == RANK[dst] and (src, at[1]) != (dst, segs[1]) \
                and is_module(modules, segs[:2]):
            found.setdefault((where, f"plugin imports a sibling plugin: `{src}/{at[1]}` uses `{dst}/{segs[1]}`", f"; move what they share into a shared module ({', '.join(sorted(SHARED[dst]))}) or a lower layer"), []).append(shown)
    for (where, rule, hint), shown in found.items():
        problems.append(f"{where}: {rule}: {', '.join(dict.fromkeys(shown))}{hint}")
    # rule 2: circles (strongly connected components of more than one module)
    for comp in sccs(edges):
        if len(comp) > 1:
            cycle = shortest_cycle(edges, comp)
            lines = [f"circle among top-level modules: {' -> '.join(cycle)}"]
            for a, b in zip(cycle, cycle[1:]):
                lines.append(f"  {a} -> {b}: {edges[a][b][0]}" + (f" (and {len(edges[a][b]) - 1} more)" if len(edges[a][b]) > 1 else ""))
            if len(comp) > len(cycle) - 1:
                lines.append(f"  (the circle's modules, all tied together: {', '.join(sorted(comp))})")
            problems.append("\n".join(lines))
    for p in problems:
        print(p)
    nfiles = len({m.file for m in modules})
    if problems:
        print(f"check-layers: {len(problems)} problem(s) in {nfiles} files")
        sys.exit(1)
    print(f"check-layers: ok ({nfiles} files, {len(refs)} crate/super paths, {sum(len(v) for v in edges.values())} edges between top-level modules, no circle)")


def is_module(modules, segs):
    return any(m.path[:len(segs)] == segs for m in modules)


def shortest_cycle(edges, comp):
    """The shortest a -> ... -> a among the modules of comp."""
    best = None
    for a in sorted(comp):
        prev, queue = {a: None}, [a]
        for v in queue:
            for w in sorted(edges.get(v, {})):
                if w == a:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    cyc = list(reversed(path)) + [a]
                    if best is None or len(cyc) < len(best):
                        best = cyc
                    queue = []
                    break
                if w in comp and w not in prev:
                    prev[w] = v
                    queue.append(w)
    return best


def sccs(edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    nodes = set(edges) | {b for v in edges.values() for b in v}
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop(); on.discard(w); comp.add(w)
                if w == v:
                    break
            out.append(comp)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


main()
PY
)

# --- self-test: a copy of the tree with planted breaches ----------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/crates/nagare" "$tmp/docs"
cp -r crates/nagare/src "$tmp/crates/nagare/"
cp -r docs/contributing "$tmp/docs/"
src=$tmp/crates/nagare/src
printf '\nuse crate::topology::Pipeline;\n' >>"$src/buffer/mod.rs"
printf '\n#[cfg(test)]\nmod planted {\n    use super::super::tsv::Tsv;\n}\n' >>"$src/parsers/csv.rs"
printf '\nuse crate::{inputs::{common, tail}, outputs::stdout::StdoutConfig};\n' >>"$src/outputs/file.rs"
printf '\nuse crate::parsers::ParserConfig as _;\n' >>"$src/formats/mod.rs"
printf '\nfn planted() {\n    crate::formats::otlp::planted();\n}\n' >>"$src/parsers/mod.rs"
printf '\npub mod planted;\n' >>"$src/lib.rs"
: >"$src/planted.rs"
out=$(python3 -c "$CHECK" "$src/lib.rs" 2>&1) && { echo "check-layers self-test: the planted breaches passed"; exit 1; }
missing=0
for want in \
  'buffer/mod.rs:.*upward import: `buffer` (layer 1) uses `topology` (layer 5): crate::topology::Pipeline' \
  'circle among top-level modules: buffer -> topology -> buffer' \
  'parsers/csv.rs:.*plugin imports a sibling plugin: `parsers/csv` uses `parsers/tsv`' \
  'outputs/file.rs:.*`outputs/file` uses `inputs/tail`' \
  'outputs/file.rs:.*`outputs/file` uses `outputs/stdout`' \
  'circle among top-level modules: formats -> parsers -> formats' \
  'top-level module `planted` is not in the layer list'; do
  grep -q -- "$want" <<<"$out" || { echo "check-layers self-test: not reported: $want"; missing=1; }
done
if grep -q 'uses `inputs/common`' <<<"$out"; then
  echo "check-layers self-test: inputs/common (shared) was reported"; missing=1
fi
if [ "$missing" = 1 ]; then
  echo "--- what the check printed on the planted tree:"; echo "$out"; exit 1
fi

# --- the check ----------------------------------------------------------------
exec python3 -c "$CHECK" crates/nagare/src/lib.rs
