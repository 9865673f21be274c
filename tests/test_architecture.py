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
