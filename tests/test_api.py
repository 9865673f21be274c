"""The public Python API: README's block runs as written, in a loop, in any import order."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_python() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README shows no Python block"
    return "\n".join(blocks)


def _run(code: str):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


_LOOP = """
import numpy as np
{pre}
block = {block!r}
for _ in range(2):
    ns = {{}}
    exec(block, ns)
    assert ns["v"].ok, ns["v"].summary()
    assert ns["res"].parent[int(ns["roots"][0])] == int(ns["roots"][0])
import dbfs
for r in ns["roots"][:3]:             # the loop over roots README's users write
    res = dbfs.bfs(ns["g"], int(r), algorithm="do")
    assert dbfs.validate(ns["edges"], int(r), res.parent).ok
print("ok")
"""


@pytest.mark.parametrize("pre", ["", "import dbfs.bfs.cpu, dbfs.validate", "import dbfs.validate.gpu, dbfs.bfs.dask"])
def test_readme_block_in_a_loop(pre):
    """README's block, twice, then dbfs.bfs/dbfs.validate over several roots,
    with the subpackages imported first or not (they used to shadow the functions)."""
    p = _run(_LOOP.format(pre=pre, block=_readme_python()))
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-2000:]


def test_api_names_are_stable():
    """Each public name is one object on every access, before and after the subpackages load."""
    code = """
import dbfs
names = ["kronecker_edges", "graph500_roots", "build_csr", "bfs", "validate", "GraphSpec", "edges_dask"]
before = {n: getattr(dbfs, n) for n in names}
import dbfs.bfs.cpu, dbfs.bfs.policy, dbfs.validate, dbfs.kernel1, dbfs.generate
after = {n: getattr(dbfs, n) for n in names}
assert all(before[n] is after[n] for n in names), [n for n in names if before[n] is not after[n]]
assert all(callable(after[n]) for n in names)
import dbfs.bfs as b, dbfs.validate as v
assert b is dbfs.bfs and v is dbfs.validate
print("ok")
"""
    p = _run(code)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-2000:]


def test_callable_packages_forward_to_their_function():
    import numpy as np

    import dbfs
    import dbfs.bfs
    import dbfs.validate

    edges = dbfs.kronecker_edges(8)
    g = dbfs.build_csr(edges, n_vertices=1 << 8)
    root = int(dbfs.graph500_roots(edges, 8, n=1)[0])
    a = dbfs.bfs(g, root, algorithm="spmv")                 # deterministic parents
    b = dbfs.bfs.bfs(g, root, algorithm="spmv")
    assert np.array_equal(a.parent, b.parent)
    assert dbfs.validate(edges, root, a.parent).nedge == dbfs.validate.validate(edges, root, a.parent).nedge
