"""The shape of the package source (docs/layout.md): files stay under a line budget, no module reaches
into another's private names, the import graph is acyclic, and no block of code is repeated.

Each test reads `rlx_jax/` as text and as `ast`; nothing is imported but the package root (to
find it). Every failure names all the places at fault, not just the first.
"""
import ast
import collections
import os

import rlx_jax

ROOT = os.path.dirname(os.path.abspath(rlx_jax.__file__))
LINE_BUDGET = 400
MIN_BLOCK = 6           # consecutive significant lines that count as a duplicated block


def _sources():
    """{dotted module name: path} for every .py file under rlx_jax/."""
    out = {}
    base = os.path.dirname(ROOT)
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, base)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = path
    return out


SOURCES = _sources()
PACKAGES = {m for m, p in SOURCES.items() if p.endswith("__init__.py")}


def _rel(path):
    return os.path.relpath(path, os.path.dirname(ROOT))


def _tree(module):
    with open(SOURCES[module], encoding="utf-8") as fh:
        return ast.parse(fh.read(), SOURCES[module])


def _resolve(module, node):
    """The absolute module a `from ... import` names, relative levels resolved against `module`."""
    if not node.level:
        return node.module or ""
    # the package that a relative import starts from: the module itself if it is a package
    parts = module.split(".") if module in PACKAGES else module.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(module):
    """(line, imported module, names) for every import anywhere in `module` (function-level
    imports included); `names` is None for `import x`."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _resolve(module, node), [a.name for a in node.names]


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# ---- line budget ----

def test_line_budget():
    counts = {}
    for path in SOURCES.values():
        with open(path, encoding="utf-8") as fh:
            counts[_rel(path)] = sum(1 for _ in fh)
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    table = "\n".join(f"{'OVER' if n > LINE_BUDGET else '    '} {n:5d}  {p}" for p, n in rows)
    print(f"\nlines per file (budget {LINE_BUDGET}):\n{table}")
    over = [p for p, n in rows if n > LINE_BUDGET]
    assert not over, (f"{len(over)} file(s) over {LINE_BUDGET} lines (marked OVER):\n{table}")


# ---- no private imports ----

def _package(module):
    return module if module in PACKAGES else module.rpartition(".")[0]


def _own_private_module(module, name):
    """Whether dotted `name` is a private module inside `module`'s own package (such a module
    is the package's business, not another module's private name)."""
    return name in SOURCES and name.startswith(_package(module) + ".")


def test_no_private_imports():
    found = []
    for module, path in sorted(SOURCES.items()):
        for line, target, names in _imports(module):
            if names is None:
                parts = target.split(".")
                if any(_is_private(p) for p in parts) and not _own_private_module(module, target):
                    found.append(f"{_rel(path)}:{line}: import {target}")
                continue
            private = [n for n in names if _is_private(n)
                       and not _own_private_module(module, f"{target}.{n}")]
            if private and target != module:
                found.append(f"{_rel(path)}:{line}: from {target} import {', '.join(private)}")
    assert not found, ("modules importing another module's private names:\n  "
                       + "\n  ".join(found))


# ---- JAX's private modules only through jax_internals.py ----

# Every module, the conformance runner (which patches jax._src.api, test_util and pjit) among
# them, reads JAX's internals through one module, which knows where each supported release
# keeps them
JAX_PRIVATE_OK = ("rlx_jax.jax_internals",)


def test_jax_private_modules_only_through_jax_internals():
    found = [f"{_rel(path)}:{line}: {target}" for module, path in sorted(SOURCES.items())
             if not module.startswith(JAX_PRIVATE_OK)
             for line, target, _ in _imports(module) if target.startswith("jax._src")]
    assert not found, ("modules importing jax._src directly (use jax_internals.module):\n  "
                       + "\n  ".join(found))


# ---- no import cycles ----

def _import_graph():
    """{module: {imported rlx_jax module, ...}}, `from pkg import name` resolved to the submodule
    `pkg.name` when that is a module; edges from a package's __init__ to its own submodules
    (rule-registration imports) are left out."""
    graph = {}
    for module in SOURCES:
        edges = set()
        for _, target, names in _imports(module):
            targets = []
            if names is None:
                targets.append(target)
            else:
                for n in names:
                    sub = f"{target}.{n}"
                    targets.append(sub if sub in SOURCES else target)
            for t in targets:
                while t and t not in SOURCES:       # `import a.b.c` of a non-module: its module
                    t = t.rpartition(".")[0]
                if not t or t == module or not t.startswith("rlx_jax"):
                    continue
                if module in PACKAGES and t.startswith(module + "."):
                    continue
                edges.add(t)
        graph[module] = edges
    return graph


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _a_cycle(graph, comp):
    """One concrete cycle through the component's first module, as a path."""
    comp_set, start = set(comp), comp[0]
    prev, queue = {start: None}, collections.deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & comp_set):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def test_cycle_finder_sees_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    graph = _import_graph()
    cycles = _cycles(graph)
    report = "\n".join(f"  {len(c)} modules: {', '.join(c)}\n"
                       f"    e.g. {' -> '.join(_a_cycle(graph, c))}" for c in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s) among rlx_jax modules:\n{report}"


# ---- no duplicated blocks ----

def _significant(path):
    """(line number, stripped text) of the lines that count: not blank, not comment-only, not
    only brackets / commas / docstring quotes."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if not s.strip("()[]{},:;'\" "):
                continue
            out.append((i, s))
    return out


def _duplicate_blocks(lines, MIN_BLOCK=MIN_BLOCK):  # noqa: N803 (the module constant)
    """[(block text, [(path, first line, last line), ...])] for every maximal run of MIN_BLOCK or
    more significant lines that occurs more than once; `lines` is {path: _significant(path)}."""
    seen = collections.defaultdict(list)        # window text -> [(file, start index)]
    for f, ls in lines.items():
        for i in range(len(ls) - MIN_BLOCK + 1):
            seen[tuple(s for _, s in ls[i:i + MIN_BLOCK])].append((f, i))
    dup = {k: v for k, v in seen.items() if len(v) > 1}
    # merge overlapping windows into maximal blocks: a block grows while the next window, one
    # line on at every one of its places, is the same text there and also duplicated
    blocks, done = [], set()
    for key in sorted(dup, key=lambda k: sorted(dup[k])):
        places = sorted(dup[key])
        if all((f, i) in done for f, i in places):
            continue
        # grow forward while every place continues identically
        n = MIN_BLOCK
        while True:
            nxt = [(f, i + n - MIN_BLOCK + 1) for f, i in places]
            if not all(j + MIN_BLOCK <= len(lines[f]) for f, j in nxt):
                break
            texts = {tuple(s for _, s in lines[f][j:j + MIN_BLOCK]) for f, j in nxt}
            if len(texts) != 1 or next(iter(texts)) not in dup:
                break
            n += 1
        # every window inside this block, at every place, is accounted for
        for f, i in places:
            for j in range(i, i + n - MIN_BLOCK + 1):
                done.add((f, j))
        where = [(f, lines[f][i][0], lines[f][i + n - 1][0]) for f, i in places]
        text = "\n".join(s for _, s in lines[places[0][0]][places[0][1]:places[0][1] + n])
        blocks.append((text, where))
    return blocks


def test_duplicate_finder_sees_blocks():
    a = [(i + 1, s) for i, s in enumerate("x = 1 a b c d e f g y = 2".split())]
    b = [(i + 10, s) for i, s in enumerate("q a b c d e f g r".split())]
    blocks = _duplicate_blocks({"a.py": a, "b.py": b}, 6)
    assert blocks == [("a\nb\nc\nd\ne\nf\ng", [("a.py", 4, 10), ("b.py", 11, 17)])]
    assert _duplicate_blocks({"a.py": a, "b.py": b}, 8) == []


def test_no_duplicate_blocks():
    blocks = _duplicate_blocks({_rel(p): _significant(p) for p in SOURCES.values()})
    report = []
    for text, where in blocks:
        places = ", ".join(f"{f}:{a}-{b}" for f, a, b in where)
        first = text.splitlines()
        report.append(f"  {len(first)} lines at {places}\n      | " + "\n      | ".join(first))
    assert not blocks, (f"{len(blocks)} block(s) of {MIN_BLOCK}+ significant lines repeated in "
                        f"rlx_jax/:\n" + "\n".join(report))
