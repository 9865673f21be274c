"""Graph specifications: what a dataset is, its name, and its edge function.

A :class:`GraphSpec` fully determines a dataset's edge list. Its
``edges(start, stop)`` is a pure function returning int64 ``(k, 2)`` rows
``[start, stop)``; every kind is block-seeded (no state shared between
ranges), so the bytes never depend on chunking, workers or device.

Kinds and names (the dataset directory is ``name``):

=========  =========================================  ===============================
kind       parameters                                 name
=========  =========================================  ===============================
kronecker  scale, edgefactor, seed1, seed2            kron-s16-ef16-s2-3
rmat       + a, b, c (numerators out of 10000)        rmat-s16-ef16-a4500-b2200-c2200-s2-3
uniform    scale, edgefactor, seed1, seed2            uniform-s16-ef16-s2-3
grid2d     scale (N = 2**scale lattice vertices)      grid2d-s16
grid3d     scale                                      grid3d-s15
import     input file (edge list or Matrix Market)    import-<stem>-<sha256[:8]>
           + compact_ids                              import-<stem>-<sha256[:8]>-compact
=========  =========================================  ===============================

An import whose largest id is far above its number of distinct ids is
refused unless ``compact_ids`` relabels the ids to ``0..n-1`` in ascending
order of the original id (:func:`dbfs.generate.importer.compact_ids`);
the dataset then stores ``original_ids`` and searches use the compacted ids.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from dbfs.errors import DbfsError
from dbfs.generate.graph500 import GRAPH500_INITIATOR, check_params, kron_core
from dbfs.generate.grid import grid_counts, grid_edges
from dbfs.generate.importer import check_ids, compact_ids as compact, file_digest, read_edges
from dbfs.generate.rmat import initiator_numerators
from dbfs.generate.uniform import uniform_edges

KINDS = ("kronecker", "rmat", "uniform", "grid2d", "grid3d", "import")


#: the size/seed parameters each kind takes (the others are refused when given)
_PARAMS_OF = {
    "kronecker": ("scale", "edgefactor", "seed1", "seed2"),
    "rmat": ("scale", "edgefactor", "seed1", "seed2", "a", "b", "c"),
    "uniform": ("scale", "edgefactor", "seed1", "seed2"),
    "grid2d": ("scale",),
    "grid3d": ("scale",),
    "import": (),
}
_ALL_PARAMS = {"scale", "edgefactor", "seed1", "seed2", "a", "b", "c"}


@dataclass(frozen=True)
class GraphSpec:
    kind: str = "kronecker"
    scale: int = 16
    edgefactor: int = 16
    seed1: int = 2
    seed2: int = 3
    initiator: tuple[int, int, int] | None = None  # rmat: (a, b, c) numerators / 10000
    input: str | None = None  # import: path of the source file
    input_digest: str | None = None  # import: sha256 of the file contents
    compact_ids: bool = False  # import: ids relabelled 0..n-1 (ascending original id)
    _imported: object = field(default=None, compare=False, repr=False)

    # ---- construction -------------------------------------------------
    @classmethod
    def make(cls, kind="kronecker", scale=16, edgefactor=16, seed1=2, seed2=3,
             a=None, b=None, c=None, input=None, given=(), compact_ids=False) -> "GraphSpec":
        """Checked constructor used by the CLI and the API. ``given``: the
        parameters the user set explicitly; one that the kind does not take
        is refused (a one-line DbfsError naming it). ``compact_ids``: relabel
        an import's ids to 0..n-1 (imports only)."""
        if kind not in KINDS:
            raise DbfsError(f"unknown graph kind {kind!r}: use one of {', '.join(KINDS)}")
        if input is not None and kind != "import" and "kind" in given:
            raise DbfsError(f"--input imports a file: it does not apply to --kind {kind}; use --kind import")
        kind_of_params = "import" if input is not None else kind
        for param in sorted(set(given) & _ALL_PARAMS - set(_PARAMS_OF[kind_of_params])):
            raise DbfsError(f"--{param} does not apply to --kind {kind_of_params}: it takes "
                            f"{', '.join('--' + x for x in _PARAMS_OF[kind_of_params]) or 'no size parameters'}")
        if compact_ids and input is None:
            raise DbfsError("--compact-ids relabels the ids of an imported file: it applies to --kind import "
                            "--input FILE only; drop it")
        if kind == "import":
            if input is None:
                raise DbfsError("kind import needs an input file: pass --input FILE (edge list or .mtx)")
            return cls._from_file(input, compact_ids)
        if input is not None:
            kind = "import"
            return cls._from_file(input, compact_ids)
        max_scale = 42
        check_params(scale, edgefactor, seed1, seed2, max_scale)
        initiator = None
        if kind == "rmat":
            initiator = initiator_numerators(0.57 if a is None else a, 0.19 if b is None else b,
                                             0.19 if c is None else c)
        elif a is not None or b is not None or c is not None:
            raise DbfsError(f"--a/--b/--c set an R-MAT initiator, which kind {kind} does not take: pass --kind rmat")
        if kind in ("grid2d", "grid3d"):
            return cls(kind=kind, scale=int(scale), edgefactor=0, seed1=0, seed2=0)
        return cls(kind=kind, scale=int(scale), edgefactor=int(edgefactor), seed1=int(seed1),
                   seed2=int(seed2), initiator=initiator)

    @classmethod
    def _from_file(cls, path, compact_ids=False) -> "GraphSpec":
        p = Path(path)
        edges, n, ids = _read_import(str(p), compact_ids)
        scale = max(1, int(np.ceil(np.log2(max(n, 2)))))
        return cls(kind="import", scale=scale, edgefactor=0, seed1=0, seed2=0,
                   input=str(p.resolve()), input_digest=file_digest(str(p)), compact_ids=bool(compact_ids),
                   _imported=(edges, int(n), ids))

    @classmethod
    def from_dict(cls, d: dict) -> "GraphSpec":
        d = dict(d)
        if d.get("initiator") is not None:
            d["initiator"] = tuple(d["initiator"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and not k.startswith("_")})

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("_imported", None)
        if not d["compact_ids"]:
            d.pop("compact_ids")  # absent unless set: specs stored before the option compare equal
        if d["initiator"] is not None:
            d["initiator"] = list(d["initiator"])
        return d

    # ---- identity -----------------------------------------------------
    @property
    def name(self) -> str:
        if self.kind == "kronecker":
            return f"kron-s{self.scale}-ef{self.edgefactor}-s{self.seed1}-{self.seed2}"
        if self.kind == "rmat":
            a, b, c = self.initiator
            return f"rmat-s{self.scale}-ef{self.edgefactor}-a{a}-b{b}-c{c}-s{self.seed1}-{self.seed2}"
        if self.kind == "uniform":
            return f"uniform-s{self.scale}-ef{self.edgefactor}-s{self.seed1}-{self.seed2}"
        if self.kind in ("grid2d", "grid3d"):
            return f"{self.kind}-s{self.scale}"
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(self.input).stem)[:40]
        return f"import-{stem}-{self.input_digest[:8]}" + ("-compact" if self.compact_ids else "")

    # ---- sizes and edges ---------------------------------------------
    def counts(self) -> tuple[int, int]:
        """(n_vertices, n_edges)."""
        if self.kind in ("kronecker", "rmat", "uniform"):
            return 1 << self.scale, self.edgefactor << self.scale
        if self.kind in ("grid2d", "grid3d"):
            return tuple(int(x) for x in grid_counts(self.kind, self.scale))
        edges, n = self._load_import()
        return n, int(edges.shape[0])

    @property
    def n_vertices(self) -> int:
        return self.counts()[0]

    @property
    def n_edges(self) -> int:
        return self.counts()[1]

    @property
    def stored_dtype(self):
        """uint32 pairs while every id fits (N <= 2**32), int64 above."""
        return np.dtype(np.uint32) if self.n_vertices <= (1 << 32) else np.dtype(np.int64)

    def _load_import(self):
        if self._imported is None:
            if not Path(self.input).exists():
                raise DbfsError(f"input file {self.input} of this imported dataset is gone: pass --input again")
            if file_digest(self.input) != self.input_digest:
                raise DbfsError(f"input file {self.input} changed since import: import it again with --input")
            object.__setattr__(self, "_imported", _read_import(self.input, self.compact_ids))
        edges, n = self._imported[:2]
        return edges, int(n)

    def original_ids(self):
        """int64 ``original_ids[v]`` (the file's id of vertex ``v``) of an id-compacted import, else None."""
        if self.kind != "import" or not self.compact_ids:
            return None
        self._load_import()
        return self._imported[2]

    def edges(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """int64 (k, 2): edge tuples [start, stop) of this graph."""
        if self.kind == "kronecker":
            return kron_core(self.scale, self.n_edges, self.seed1, self.seed2, start, stop, GRAPH500_INITIATOR)
        if self.kind == "rmat":
            return kron_core(self.scale, self.n_edges, self.seed1, self.seed2, start, stop, self.initiator)
        if self.kind == "uniform":
            return uniform_edges(self.scale, self.edgefactor, self.seed1, self.seed2, start, stop)
        if self.kind in ("grid2d", "grid3d"):
            return grid_edges(self.kind, self.scale, start, stop)
        edges, _ = self._load_import()
        return np.ascontiguousarray(edges[start:stop], dtype=np.int64)


def _read_import(path: str, compact_ids: bool):
    """(edges, n_vertices, original_ids or None) of a graph file: sparse ids refused unless compacted."""
    edges, n = read_edges(path)
    if not compact_ids:
        check_ids(edges, n, path)
        return edges, int(n), None
    edges, ids = compact(edges)
    return edges, int(ids.shape[0]), ids
