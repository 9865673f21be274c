"""Whether a source-only change to ``dbfs/bfs/kernels/bfs.cu`` compiles to the same machine code.

Compiles the given older copy of bfs.cu and the current one with NVRTC (CuPy), with the options
:func:`dbfs.bfs.gpu._module` uses (``_options``), for both vertex-id types, and says whether the binaries are
byte-identical (then the change cannot move a timing). Needs a GPU machine (NVRTC for its arch).

    git show REV:dbfs/bfs/kernels/bfs.cu > old_bfs.cu.txt   # here, then on the GPU machine:
    python benchmarks/cu_same_binary.py old_bfs.cu.txt
"""
import sys
from pathlib import Path

from cupy.cuda import compiler

from dbfs.bfs import gpu


def main(old_path: str) -> int:
    new = (gpu.KERNEL_DIR / "bfs.cu").read_text()
    old = Path(old_path).read_text()
    same = True
    for vid in ("int", "long long"):
        bins = [compiler.compile_using_nvrtc(src, options=gpu._options(vid)) for src in (old, new)]
        bins = [b[0] if isinstance(b, tuple) else b for b in bins]
        print(f"VID_T={vid}: binaries {len(bins[0])} / {len(bins[1])} bytes, identical: {bins[0] == bins[1]}")
        same &= bins[0] == bins[1]
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
