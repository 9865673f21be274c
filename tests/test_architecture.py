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
    assert "Contracts: 3 kept, 0 broken." in p.stdout, p.stdout[-2000:]


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
