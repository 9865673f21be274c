"""Layer contracts (import-linter), kernel modules that never import their facade, and module sizes."""
import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "dbfs"
MAX_FILE_LINES = 650        # "about 600 lines at most" per module
MAX_FUNCTION_LINES = 110    # "about 100 lines" per function


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    p = subprocess.run([exe, "--config", str(REPO / ".importlinter")], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in p.stdout, p.stdout[-2000:]


#: Kernel 1's builders, which :mod:`dbfs.kernel1` also exports for library users
BUILDERS = ("build_csr", "build_csr_passes", "build_partitioned", "build_gpu", "build_placed", "build_csr_gpu",
            "build_csr_gpu_passes")


def test_kernel1_builders_are_reached_through_its_entries():
    """Outside dbfs/kernel1 no code names a builder: it calls :mod:`dbfs.kernel1.entry` (this process) or
    :mod:`dbfs.kernel1.on_workers` (Dask worker tasks). The import contract ``kernel1-entries`` covers the
    builders' modules; this covers the package's re-exports (``kernel1.build_partitioned(...)``)."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        if f.relative_to(PKG).parts[0] == "kernel1":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
                None
            if name in BUILDERS:
                bad.append(f"{f.relative_to(REPO)}:{node.lineno}: {name}")
    assert not bad, "call Kernel 1 through dbfs.kernel1.entry or dbfs.kernel1.on_workers:\n" + "\n".join(bad)


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


@pytest.mark.parametrize("sub", ["cpu", "dask"])
def test_kernel_packages_do_not_import_the_facade(sub):
    """dbfs/bfs/cpu and dbfs/bfs/dask sit below dbfs.bfs's __init__ (the facade): they import
    siblings by module path (dbfs.bfs.policy, dbfs.bfs.cpu...), never names from dbfs.bfs itself."""
    subs = {p.stem for p in (PKG / "bfs").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    bad = []
    for f in (PKG / "bfs" / sub).glob("*.py"):
        for mod, names in _imports(f):
            if mod == "dbfs.bfs" and any(n not in subs for n in names):
                bad.append((f.name, names))
            if mod == "dbfs" and "bfs" in names:
                bad.append((f.name, names))
    assert not bad, bad


def test_module_and_function_sizes():
    big_files, big_funcs = [], []
    for f in sorted(PKG.rglob("*.py")):
        text = f.read_text()
        n = text.count("\n")
        if n > MAX_FILE_LINES:
            big_files.append((str(f.relative_to(REPO)), n))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    big_funcs.append((f"{f.relative_to(REPO)}:{node.name}", length))
    assert not big_files, big_files
    assert not big_funcs, big_funcs


def _layout_entries() -> dict:
    """README's Layout block under ``dbfs/``: path (relative to the package) -> its job, from the indented tree."""
    import re

    text = (REPO / "README.md").read_text()
    block = text.split("\n## Layout\n", 1)[1].split("```\n", 2)[1]
    out, stack = {}, []
    for line in block.splitlines():
        m = re.match(r"^( *)(\S+)\s+(.*)$", line)
        if not m:
            continue
        depth, name, job = len(m.group(1)) // 2, m.group(2), m.group(3).strip()
        stack = stack[:depth] + [name]
        if stack[0] != "dbfs/" or depth == 0:
            continue
        out["".join(stack[1:])] = job
    return out


def test_readme_layout_lists_every_package_and_module():
    """Every package, module and CUDA source under dbfs/ is in README's Layout with its job, and nothing
    listed there is missing from the tree (``__init__.py`` files stand for their package's line)."""
    listed = _layout_entries()
    pkg = REPO / "dbfs"
    tree = set()
    for p in list(pkg.rglob("*.py")) + list(pkg.rglob("*.cu")):
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(pkg)
        tree.add(f"{rel.parent.as_posix()}/" if p.name == "__init__.py" else rel.as_posix())
    tree.discard("./")
    tree |= {f"{d.relative_to(pkg).as_posix()}/" for d in pkg.rglob("*") if d.is_dir() and any(d.glob("*.cu"))}
    assert sorted(tree - set(listed)) == [], "in the tree, not in README's Layout"
    assert sorted(set(listed) - tree) == [], "in README's Layout, not in the tree"
    assert all(job for job in listed.values()), [k for k, v in listed.items() if not v]


def _package_cycles(edges: dict) -> list:
    """Strongly connected groups of more than one node in ``edges`` (node -> set of nodes it imports)."""
    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    idx, low, stack, on, out, count = {}, {}, [], set(), [], [0]

    def visit(v):
        idx[v] = low[v] = count[0]
        count[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in idx:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in idx:
            visit(v)
    return out


def _import_edges(group) -> dict:
    import grimp

    g = grimp.build_graph("dbfs", include_external_packages=False)
    edges = {}
    for m in g.modules:
        for imp in g.find_modules_directly_imported_by(m):
            a, b = group(m, g), group(imp, g)
            if a and b and a != b:
                edges.setdefault(a, set()).add(b)
    return edges


def _top(m, g):
    """dbfs.X for every module of dbfs.X (a top-level module is its own node)."""
    parts = m.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else None


def _subpackage(m, g):
    """The package a module sits in, for modules inside a top-level package (dbfs.bfs.dask.mesh.frames -> dbfs.bfs.dask.mesh)."""
    parts = m.split(".")
    if len(parts) < 3:
        return None
    return m if g.find_children(m) else ".".join(parts[:-1])


@pytest.mark.parametrize("group", [_top, _subpackage], ids=["top-level", "subpackages"])
def test_no_import_cycle_between_packages(group):
    """Imports between packages (and between the subpackages of one package) form no cycle, imports inside
    functions included: a cycle would make the layers above a fiction."""
    edges = _import_edges(group)
    if group is _subpackage:        # a package and its own subpackages are one job's parts
        edges = {a: {b for b in bs if not (b.startswith(a + ".") or a.startswith(b + "."))} for a, bs in edges.items()}
    assert _package_cycles(edges) == []


def test_the_cycle_check_finds_a_cycle():
    assert _package_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _package_cycles({"a": {"b"}, "b": set()}) == []


def _top_names(path: Path) -> set:
    """Names a module defines at its top level (definitions, assignments, imports; inside if/try too)."""
    names = set()

    def walk(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.add(n.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                walk(node.body)
                for h in getattr(node, "handlers", []):
                    walk(h.body)
                walk(getattr(node, "orelse", []))
                walk(getattr(node, "finalbody", []))
    walk(ast.parse(path.read_text()).body)
    return names


def _module_path(mod: str):
    p = REPO.joinpath(*mod.split("."))
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").exists() else None


def test_every_dbfs_import_resolves():
    """Every ``from dbfs... import name`` in dbfs/, tests/ and benchmarks/ names a module of the tree and a name it
    defines (or a submodule), imports inside functions included: a GPU-only module, which no CPU test imports,
    cannot point at a module that moved."""
    bad = []
    files = [p for d in ("dbfs", "tests", "benchmarks") for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts]
    cache = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] == "dbfs":
                src = _module_path(node.module)
                if src is None:
                    bad.append(f"{f.relative_to(REPO)}:{node.lineno}: no module {node.module}")
                    continue
                if src not in cache:
                    cache[src] = _top_names(src)
                lazy = "__getattr__" in cache[src]         # a module __getattr__ makes its names on demand
                for a in node.names:
                    if a.name != "*" and not lazy and a.name not in cache[src] and \
                            _module_path(f"{node.module}.{a.name}") is None:
                        bad.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.module} has no {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "dbfs" and _module_path(a.name) is None:
                        bad.append(f"{f.relative_to(REPO)}:{node.lineno}: no module {a.name}")
    assert not bad, "\n".join(bad)


#: optional or import-heavy libraries an import inside a function may defer, anywhere in dbfs/
DEFERRABLE = ("cupy", "cupyx", "dask_cuda", "bokeh", "pynvml", "matplotlib", "dask_jobqueue", "prometheus_client")
#: libraries deferred only in the modules of the CLI's start (what ``python -m dbfs.cli --help`` loads):
#: third-party ones besides numpy and click, and multiprocessing (its import costs the CLI's start more
#: than all the dbfs modules it loads besides numpy)
CLI_START = ("distributed", "dask", "zarr", "numba", "psutil", "tqdm", "yaml", "multiprocessing")


def _modules() -> dict:
    """dbfs module name -> its parsed source."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(p.read_text())
    return out


def _named(node, mods, cur: str) -> list:
    """What an import statement of module ``cur`` makes Python run: dbfs modules by name, other packages by
    their top name (``from pkg import sub`` of a dbfs submodule needs the submodule, not the rest of pkg)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:      # relative: from the package of cur (cur itself when it is a package)
            pkg = cur.split(".") if _module_path(cur).name == "__init__.py" else cur.split(".")[:-1]
            base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
        names = ([] if len(subs) == len(node.names) else [base]) + subs
    return [n if n.split(".")[0] == "dbfs" else n.split(".")[0] for n in names]


def _top_imports(tree, mods, cur: str) -> list:
    """What a module imports when it is imported (its body, inside if/try/with too; not under TYPE_CHECKING)."""
    out = []

    def walk(body):
        for n in body:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                out.extend(_named(n, mods, cur))
            elif isinstance(n, ast.If) and "TYPE_CHECKING" not in ast.unparse(n.test):
                walk(n.body)
                walk(n.orelse)
            elif isinstance(n, ast.Try):
                for b in [n.body, n.orelse, n.finalbody] + [h.body for h in n.handlers]:
                    walk(b)
            elif isinstance(n, (ast.With, ast.ClassDef)):
                walk(n.body)
    walk(tree.body)
    return out


def _parents(m: str) -> list:
    parts = m.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _reach(names, tops, running=()) -> set:
    """Every module importing ``names`` runs: their top-level imports and parent packages, transitively
    (a parent in ``running``, already being imported, runs nothing again)."""
    seen, todo = set(), list(names)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in tops:
            todo += tops[m] + [p for p in _parents(m) if p not in running]
    return seen


def _imports_in_functions(tree):
    def visit(node, inside):
        for ch in ast.iter_child_nodes(node):
            if inside and isinstance(ch, (ast.Import, ast.ImportFrom)):
                yield ch
            yield from visit(ch, inside or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    yield from visit(tree, False)


def test_imports_inside_functions_are_marked_deferrals():
    """An import inside a function defers a dependency, and says which on its line (the first line of a
    multi-line import) as ``# deferred: <reason>``; everything else is imported at the module's top.
    A reason is one of:

    - ``<lib>``, one of :data:`DEFERRABLE` (optional extras, or heavy to import): the import names the
      library, or a dbfs module whose top-level imports reach it (transitively, a package's ``__init__``
      included);
    - ``<lib> (CLI start)``, one of :data:`CLI_START`, the same reach, and only in a module that
      ``python -m dbfs.cli --help`` loads: the CLI starts without them (checked by running it). Outside
      the CLI's start these are ordinary top-level imports;
    - ``cycle <a> <-> <b>``: module a imports b inside a function because b's top-level imports reach a
      (at a's top, importing either would run into the other half-initialised); a and b are module names
      or their ends from a dot on (``layout.worker``).

    So the standard library, numpy, click and dbfs modules that reach none of these libraries are never
    imported inside a function."""
    import re

    code = ("import contextlib, io, runpy, sys\nsys.argv = ['dbfs', '--help']\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        runpy.run_module('dbfs.cli', run_name='__main__')\n"
            "    except SystemExit:\n        pass\nprint(' '.join(sorted(sys.modules)))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    loaded = set(p.stdout.split())
    assert not {m.split(".")[0] for m in loaded} & set(CLI_START), "the CLI's start imports a CLI_START library"
    mods = _modules()
    tops = {m: _top_imports(t, mods, m) for m, t in mods.items()}
    bad = []
    for m, tree in mods.items():
        src = _module_path(m).read_text().splitlines()
        for node in _imports_in_functions(tree):
            where = f"{m}:{node.lineno}: {src[node.lineno - 1].strip()}"
            mark = re.search(r"#\s*deferred:\s*(.*?)\s*(?:#|$)", src[node.lineno - 1])
            if mark is None:
                bad.append(f"{where}: no '# deferred: <reason>' (else import it at the module's top)")
                continue
            reason, named = mark.group(1), _named(node, mods, m)
            cyc = re.fullmatch(r"cycle (\S+) <-> (\S+)", reason)
            lib = re.fullmatch(r"(\w+)( \(CLI start\))?", reason)
            if cyc:     # a module's name, or its end from a dot on (layout.worker for dbfs.bfs.dask.layout.worker)
                a, b = cyc.groups()
                b = next((n for n in named if n == b or n.endswith("." + b)), None)
                ok = (m == a or m.endswith("." + a)) and b is not None and \
                    m in _reach(tops.get(b, []), tops, {m, *_parents(m)})
            elif lib and lib.group(2):
                ok = lib.group(1) in CLI_START and m in loaded and lib.group(1) in _reach(named, tops)
            elif lib:
                ok = lib.group(1) in DEFERRABLE and lib.group(1) in _reach(named, tops)
            else:
                ok = False
            if not ok:
                bad.append(f"{where}: the reason does not hold (see this test's docstring)")
    assert not bad, "\n".join(bad)


_STAND_IN = r'''
import sys, types, importlib
class _Any:                      # answers every attribute, call and index: no device behaviour at all
    def __getattr__(self, n): return _Any()
    def __call__(self, *a, **k): return _Any()
    def __getitem__(self, k): return _Any()
    def __mro_entries__(self, bases): return (object,)
    def __or__(self, o): return _Any()
    def __int__(self): return 0
for n in ["cupy", "cupy.cuda", "cupy.cuda.nccl", "cupy.cuda.runtime", "cupyx", "cupyx.scipy", "dask_cuda", "pynvml"]:
    m = types.ModuleType(n); m.__path__ = []; m.__getattr__ = lambda a: _Any(); sys.modules[n] = m
importlib.import_module(sys.argv[1])
'''


def _gpu_only_modules() -> list:
    out = []
    for f in sorted(PKG.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        tree = ast.parse(f.read_text())
        for node in tree.body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] in ("cupy", "cupyx") for n in names):
                rel = f.relative_to(REPO).with_suffix("")
                out.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
                break
    return out


@pytest.mark.parametrize("module", _gpu_only_modules())
def test_gpu_only_module_imports_alone(module):
    """A module that imports CuPy at its top is never imported by a CPU test: imported alone in a fresh
    interpreter, against a stand-in for CuPy that only answers names (no device behaviour is checked here),
    it must load, so a moved module or an import cycle among the GPU modules fails here and not on a GPU."""
    p = subprocess.run([sys.executable, "-c", _STAND_IN, module], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
