"""The run-level backend contract and its registry.

Contract (the Graph500 reference's ``make_graph_data_structure`` /
``run_bfs`` / ``get_edge_count_for_teps`` split, as one class per backend)::

    B = get_backend(name)          # a Backend subclass
    B.check(cfg, given)            # refuse what does not apply, before any work
    ds = B.dataset(target, root, client, quiet)     # generate or open the edge list
    built, k1 = B.csr(ds, cfg, client)              # Kernel 1: build or reuse the CSR variant
    b = B(cfg, client)
    b.load(ds, built)              # -> seconds (not Kernel 1 time)
    b.warm()                       # -> seconds: the search-side kernels loaded (compile_time, not timed)
    b.prepare()                    # -> seconds (per-graph search structures: Kernel 1 time)
    roots = b.roots(n)             # the Graph500 search keys
    b.search(root)                 # -> seconds (Graph500 Kernel 2 time); b.level_stats
    b.search_many(roots)           # -> [(seconds, level_stats)] of searches one after another
    b.validate(root)               # -> ValidationResult against the INPUT edges
    b.validate_many(roots)         # -> the same for the last searches, when b.validate_batch > 1
    b.nedge(root)                  # -> Graph500 nedge without the other checks
    b.parents()                    # -> int64 parents in original ids
    b.close()

Kernel 1's result ``built`` is the variant's name, or a backend's typed
result whose ``str()`` is that name (the dask backend's:
:mod:`dbfs.bfs.dask.search.graphs`), handed to :meth:`Backend.load` as it is.

Compile time: the Numba kernels of a stage are loaded before its timer
starts (compiled on the first run, read from Numba's on-disk cache after),
in this process and on every worker of the client (:func:`warm`): the
base class's :meth:`Backend.dataset` and :meth:`Backend.csr`, before a
CPU generation or Kernel 1 that has work to do, run the same stages on a
tiny graph of the same kind (:func:`warm_stages`; a Numba kernel is
compiled once per argument type, and the tiny graph's arrays have the
types of the real one's while its ids fit int32) and add the seconds to
``ds.memo["compile_time"]``; :meth:`Backend.warm` does the same for what
runs in this process after loading (the CPU backend: searches, validation,
root selection). The pipeline reports their sum as the run's
``compile_time``, apart from ``generation_time`` and ``construction_time``.

Which CSR variant: ``cfg.relabel`` ``"auto"`` (``dbfs run`` / ``dbfs bfs``
without ``--relabel``) is resolved to ``"none"`` or ``"degree"`` by
:func:`resolve_relabel` before any work, in one place: ``--placement
degree*`` takes the degree-ordered CSR; otherwise the backend's
:meth:`Backend.default_relabel` (each class states its choice and why, from
the measurements in docs/BENCHMARKS.md), falling back, for a search that does
not build (``dbfs bfs NAME``), to the variant NAME has stored. The choice is
said on stderr and kept in ``cfg.relabel_why`` (the JSON's ``config``); an
explicit ``--relabel none|degree`` is never changed.

Registry: :data:`BACKENDS` maps a name to ``"module:Class"``; adding a
backend is one new module and one line there. A backend's class states
what it needs: ``cluster`` ("always": the searches run on Dask workers;
"stages": only generation and Kernel 1 use a cluster, closed before the
searches; "never"), ``options`` (the run options it accepts beyond the
common ones) and :meth:`Backend.unavailable` (why it cannot run here).
"""
from __future__ import annotations

import importlib
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace

from dbfs.errors import DbfsError
from dbfs.progress import say
from dbfs.split import PLACEMENT_ORDER
from dbfs.workers_info import workers_info

__all__ = ["BACKENDS", "COMMON_OPTIONS", "Backend", "RunConfig", "backend_table",
           "check_degree_placement", "check_split_placement", "get_backend", "resolve_relabel", "say_relabel",
           "kernel1_warm", "tiny_spec", "warm", "warm_stages"]

#: backend name -> "module:Class"
BACKENDS = {
    "cpu": "dbfs.backends.cpu:CpuBackend",
    "gpu": "dbfs.backends.gpu:GpuBackend",
    "dask": "dbfs.backends.dask:DaskBackend",
}

#: RunConfig fields every backend accepts
COMMON_OPTIONS = frozenset({"algorithm", "backend", "n_roots", "validate", "dedupe", "quiet", "opts"})

#: how each option is spelled on the command line (for error messages)
FLAGS = {"partitions": "--partitions", "partitioning": "--partitioning", "relabel": "--relabel",
         "dedupe": "--keep-duplicates", "device_memory_limit": "--device-memory-limit", "energy": "--energy",
         "n_roots": "--roots", "transport": "--transport", "placement": "--placement"}

#: why an option of one backend does not apply to the others (unless a backend says more)
_WHY = {"placement": "it places partitions on Dask workers (--backend dask) or splits the CSR between GPU and "
                     "host memory (--backend gpu): use one of those or drop it"}


@dataclass
class RunConfig:
    """What to run: the options of ``dbfs run`` / ``dbfs bfs`` after the CLI translated its flags."""
    algorithm: str = "do"
    backend: str = "cpu"
    n_roots: int = 64
    validate: bool = True
    partitions: int = 1
    partitioning: str = "block"
    relabel: str = "none"          # "auto": the backend's default, resolve_relabel() before any work
    relabel_why: str = ""          # why "auto" chose ``relabel`` (said on stderr, in the JSON); "" when given
    dedupe: bool = True
    opts: dict = field(default_factory=dict)
    quiet: bool = False
    energy: bool = False
    device_memory_limit: int | None = None
    placement: str = "block"
    record_path: str | None = None  # the --json file, kept up to date as the run goes (dbfs.report.write_partial)


class Backend:
    """Base class: the shared defaults of the contract (see the module docstring)."""

    name = ""
    #: the in-memory kernel module (dbfs.bfs backend) for untimed comparisons of one search
    kernels = "cpu"
    cluster = "stages"
    options: frozenset = frozenset()
    #: option -> why it does not apply to this backend (the error's second half)
    refusals: dict = {}

    def __init__(self, cfg: RunConfig, client=None):
        self.cfg, self.client = cfg, client
        self.level_stats = None
        self.events: list = []
        self.load_time = self.prepare_time = self.compile_time = 0.0

    # ---- what the backend is
    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run on this machine (None: it can)."""
        return None

    @classmethod
    def algorithms(cls) -> list:
        raise NotImplementedError

    @classmethod
    def check(cls, cfg: RunConfig, given=()) -> None:
        """Refuse, in one line, an option ``given`` on the command line that does
        not apply here (set to anything but its default), an unknown algorithm,
        or a backend that cannot run here."""
        default = RunConfig()
        for opt in sorted(set(given) - COMMON_OPTIONS - set(cls.options)):
            if getattr(cfg, opt, None) == getattr(default, opt, object()):
                continue          # e.g. --partitions 1 with the cpu backend: what it does anyway
            why = cls.refusals.get(opt, _WHY.get(opt, f"the {cls.name} backend has no such option"))
            raise DbfsError(f"{FLAGS.get(opt, '--' + opt.replace('_', '-'))} does not apply to --backend {cls.name}: "
                            f"{why}")
        if cfg.n_roots < 1:
            raise DbfsError(f"--roots {cfg.n_roots} is invalid: use at least 1 search key (Graph500 uses 64)")
        if cfg.partitions < 1:
            raise DbfsError(f"--partitions {cfg.partitions} is invalid: use 1 or more")
        reason = cls.unavailable()
        if reason:
            raise DbfsError(f"--backend {cls.name} cannot run here: {reason}")
        names = cls.algorithms()
        if cfg.algorithm not in names:
            raise DbfsError(f"unknown BFS algorithm {cfg.algorithm!r} for backend {cls.name}: use one of "
                            f"{', '.join(names)}")

    @classmethod
    def ahead_job(cls, cfg: RunConfig, target) -> dict | None:
        """The kernels a second process may compile while the stages before the searches run
        (:mod:`dbfs.backends.ahead`), or None: nothing of this backend is compiled ahead."""
        return None

    @classmethod
    def default_relabel(cls, cfg: RunConfig, client=None, ds=None) -> tuple:
        """``(relabel, why)``: the CSR variant this backend searches when ``--relabel`` is not given
        (``client``: the run's, ``ds``: its dataset, each None where not known yet); the plain CSR here."""
        return "none", "the plain CSR"

    def describe(self) -> dict:
        """What the run's JSON records about where the searches ran (per worker for dask); {} here."""
        return {}

    @classmethod
    def fits_cluster(cls, client, n: int, m: int, scale: int | None = None) -> dict:
        """Refuse in one line, once the run's cluster has started and before anything is generated, a graph
        that this backend's workers cannot hold (:func:`dbfs.preflight.check_cluster`); {} here: the
        searches run in this process, checked before the cluster (:func:`dbfs.preflight.check_run`)."""
        return {}

    # ---- the stages before the searches
    @classmethod
    def dataset(cls, target, root_dir, client=None, quiet=False, scan=True):
        """A complete dataset: ``target`` a GraphSpec (generated if needed) or a stored name; a stored edge list
        is reused after a CRC scan of its chunk files unless ``scan`` is False (:func:`dbfs.store.generate`)."""
        from dbfs import store  # deferred: distributed (CLI start)
        from dbfs.spec import GraphSpec  # deferred: dask (CLI start)

        if isinstance(target, GraphSpec):
            seconds = 0.0
            if store.stored(target, root_dir) is None:   # generation has work to do: its kernels first
                seconds = warm("generation", client, quiet, warm_stages, tiny_spec(target))
            ds, _ = store.generate(target, root_dir, client=client, quiet=quiet, edges="auto", scan=scan)
            ds.memo["compile_time"] = ds.memo.get("compile_time", 0.0) + seconds
            return ds
        return store.open_dataset(target, root_dir)

    #: whether the searches can take a CSR that Kernel 1 kept in memory (``ds.memo["graph"]``)
    #: when the disk has no room for it; the others need it stored
    in_memory_csr = False

    @classmethod
    def csr(cls, ds, cfg: RunConfig, client=None) -> tuple:
        """(variant name, its attributes): the CSR variant ``cfg`` searches, through Kernel 1's CPU entry
        (:func:`dbfs.kernel1.entry.kernel1_cpu`: reused, built out of core on ``client``, or, with
        :attr:`in_memory_csr`, kept in memory for this run where the disk has no room for it)."""
        from dbfs.kernel1.entry import (  # deferred: distributed (CLI start)
            Kernel1Options, keep_in_passes, kernel1_cpu)

        return kernel1_cpu(ds, Kernel1Options.of(cfg), client, kernel1_warm(ds, cfg.partitions, cfg.quiet),
                           keep=keep_in_passes if cls.in_memory_csr else None)

    # ---- the searches
    def load(self, ds, variant: str) -> float:
        raise NotImplementedError

    def warm(self) -> float:
        """Load the Numba kernels this process runs after loading (searches, validation, root selection)
        before any of them is timed; returns (and keeps as ``compile_time``) the seconds. None here."""
        return self.compile_time

    def prepare(self) -> float:
        """Build the per-graph search structures of an in-memory graph (``self.graph``) with the
        backend's kernel module; returns (and keeps as ``prepare_time``) the seconds it took."""
        from dbfs.bfs import prepare  # deferred: numba (CLI start)

        graph = getattr(self, "graph", None)
        if graph is None:
            return 0.0
        t0 = time.perf_counter()
        prepare(graph, self.kernels)
        self.prepare_time = time.perf_counter() - t0
        return self.prepare_time

    def roots(self, n: int):
        """The Graph500 search keys (section 6), eligibility tested by :meth:`eligible`."""
        from dbfs.roots import select_roots  # deferred: dask (CLI start)

        spec = self.ds.attrs["spec"]
        return select_roots(self.ds.n_vertices, spec.get("seed1", 2), spec.get("seed2", 3), n, self.eligible())

    def eligible(self):
        """``test(candidates) -> bool mask``: which candidate roots have a non-self-loop input edge
        (here streamed over the stored edges; a backend holding them closer overrides this)."""
        from dbfs.roots import eligible  # deferred: dask (CLI start)

        edges = self.ds.edges()
        return lambda cands: eligible(edges, cands)

    def search(self, root: int) -> float:
        raise NotImplementedError

    def search_many(self, roots) -> list:
        """``(seconds, level_stats)`` of searches from ``roots``, in order, as :meth:`search` one by one; a
        backend whose searches run on a cluster starts them as one batch (one round trip). Each search's
        parents are kept as :meth:`search` keeps them (the last ones for :meth:`validate_many`)."""
        out = []
        for r in roots:
            t = self.search(int(r))
            out.append((t, self.level_stats))
        return out

    def validate(self, root: int):
        raise NotImplementedError

    def nedge(self, root: int) -> int:
        raise NotImplementedError

    #: searches validated together (the backend keeps their parents until :meth:`validate_many`); 1: each
    #: search is validated right after it
    validate_batch = 1

    def validate_many(self, roots) -> list:
        """ValidationResults of the last ``len(roots)`` searches (from ``roots``, in order), for a
        backend with ``validate_batch`` > 1."""
        raise NotImplementedError

    def _hold(self, root, parent) -> None:
        """Keep this search's ``(root, parent)`` for :meth:`validate_many` (the last ``validate_batch`` kept)."""
        if self.validate_batch > 1:
            self.held = self.held[max(0, len(self.held) + 1 - self.validate_batch):] + [(int(root), parent)]

    def _take_held(self, roots) -> list:
        """The kept ``(root, parent)`` of the last ``len(roots)`` searches, which were from ``roots``; none
        kept after."""
        held, self.held = self.held[-len(roots):], []
        assert [r for r, _ in held] == [int(r) for r in roots], "validate_many: not the last searches"
        return held

    def parents(self):
        raise NotImplementedError

    def close(self) -> None:
        pass


def warm(what: str, client, quiet: bool, fn, *args) -> float:
    """Run ``fn(*args)`` here, then once on every worker of ``client`` (one task pinned to each), before
    the stage ``what`` starts its timer: ``fn`` runs that stage's Numba kernels on tiny inputs, so each
    process has them loaded. The first process compiles them and writes Numba's on-disk cache (``cache=True``:
    ``$NUMBA_CACHE_DIR``, else the package's ``__pycache__``, else the user's cache directory, whichever is
    writable); the workers, started from the same environment, then read that cache rather than compile in
    parallel. Says both ends on stderr; returns the wall seconds (the run's ``compile_time``).
    """
    t0 = time.perf_counter()
    say(f"loading the Numba kernels of {what} (compiled on a first run, cached for later ones; not timed) ...",
        quiet)
    workers = []
    try:
        fn(*args)
        workers = list(workers_info(client)) if client is not None else []
        if workers:
            tag = f"warm-{what.replace(' ', '').lower()}-{uuid.uuid4().hex[:8]}"
            futures = [client.submit(fn, *args, key=f"{tag}-{i}", workers=[w], allow_other_workers=False,
                                     pure=False) for i, w in enumerate(workers)]
            client.gather(futures)
            del futures
    except (DbfsError, OSError) as e:   # e.g. no room in the temporary directory: the stage itself decides
        say(f"could not load the Numba kernels of {what} beforehand ({e}): its time includes compiling them",
            quiet)
        return time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    where = f" (here and on {len(workers)} worker{'s' if len(workers) != 1 else ''})" if workers else ""
    say(f"Numba kernels of {what} ready in {seconds:.2f} s{where}", quiet)
    return seconds


def tiny_spec(spec, partitions: int = 1):
    """A graph of ``spec``'s kind small enough to generate and build in milliseconds (a 2-D grid for an
    imported graph, whose generation is a write), with at least ``2 * partitions`` vertices."""
    from dbfs.spec import GraphSpec  # deferred: dask (CLI start)

    scale = max(6, (2 * int(partitions) - 1).bit_length())
    if spec.kind == "import":
        return GraphSpec(kind="grid2d", scale=scale, edgefactor=0, seed1=0, seed2=0)
    return replace(spec, scale=scale)


def warm_stages(tiny, build=None) -> None:
    """Generate ``tiny`` (:func:`tiny_spec`) into a temporary datasets root and, with ``build``, run
    Kernel 1's CPU entry on it (:func:`dbfs.kernel1.entry.kernel1_cpu`) out of core, ``(P, partitioning,
    dedupe, relabel)``; or, with ``build="passes"``, the in-memory build in passes
    (:func:`dbfs.kernel1.entry.keep_in_passes`), nothing stored. The same code as the real stages, so
    every Numba kernel they call is loaded here with the argument types they pass. Nothing is said; the
    root is removed."""
    from dbfs import store  # deferred: distributed (CLI start)
    from dbfs.kernel1.entry import (  # deferred: distributed (CLI start)
        Kernel1Options, keep_in_passes, kernel1_cpu)

    with tempfile.TemporaryDirectory(prefix="dbfs-warm-") as root:
        ds, _ = store.generate(tiny, root, quiet=True, edges="auto")
        if build == "passes":
            keep_in_passes(ds, Kernel1Options(quiet=True), "")
        elif build is not None:
            P, partitioning, dedupe, relabel = build
            kernel1_cpu(ds, Kernel1Options(P, partitioning, dedupe, relabel, quiet=True))


def kernel1_warm(ds, partitions: int, quiet: bool):
    """``warm(build, client) -> seconds`` for Kernel 1's entries (:mod:`dbfs.kernel1.entry`): the build
    they chose run by :func:`warm_stages` on a tiny graph of ``ds``'s kind (:func:`tiny_spec`), here and
    on ``client``'s workers, before Kernel 1's clock."""
    tiny = tiny_spec(ds.spec, partitions)
    return lambda build, client: warm("Kernel 1", client, quiet, warm_stages, tiny, build)


def check_split_placement(cfg: RunConfig, name: str, who: str) -> None:
    """Refuse, in one line, a ``--placement`` that a backend splitting one CSR by row order
    (:data:`dbfs.split.PLACEMENT_ORDER`) cannot take: one it has no order for, or ``degree*`` without the
    degree-ordered CSR. ``who`` names what splits (the error's words)."""
    if cfg.placement not in PLACEMENT_ORDER:
        *first, last = PLACEMENT_ORDER
        raise DbfsError(f"--placement {cfg.placement} does not apply to --backend {name}: {who} splits the "
                        f"adjacency by row order; use {', '.join(first)} or {last}")
    check_degree_placement(cfg, "keeps degree classes on the device")


def check_degree_placement(cfg: RunConfig, does: str) -> None:
    """Refuse, in one line, ``--placement degree*`` with ``--relabel none`` (``does``: what the placement
    does, the error's words); ``auto`` resolves to ``degree`` there (:func:`resolve_relabel`)."""
    if cfg.placement.startswith("degree") and cfg.relabel not in ("degree", "auto"):
        raise DbfsError(f"--placement {cfg.placement} {does}: it needs the degree-ordered CSR, add --relabel degree")


def resolve_relabel(cfg: RunConfig, client=None, ds=None, stored: bool = False,
                    quiet: bool | None = None) -> RunConfig:
    """``cfg`` with ``relabel="auto"`` resolved to ``"none"`` or ``"degree"`` (``cfg`` itself otherwise).

    ``--placement degree*`` takes the degree-ordered CSR; else the backend's
    :meth:`Backend.default_relabel` with ``client`` and ``ds`` (the dataset, when known). ``stored``
    (a search that does not build its CSR, ``ds`` given): when that variant is not stored but the
    other one is, the stored one. The choice and why are said in one line on stderr (unless
    ``quiet``, default ``cfg.quiet``; :func:`say_relabel`) and kept in ``relabel_why``.
    """
    from dbfs import kernel1  # deferred: distributed (CLI start)

    if cfg.relabel != "auto":
        return cfg
    B = get_backend(cfg.backend)
    if cfg.placement.startswith("degree"):
        relabel, why = "degree", f"--placement {cfg.placement} places by degree"
    else:
        relabel, why = B.default_relabel(cfg, client, ds)
        why = f"default for --backend {B.name}: {why}"
        if stored:
            other = "none" if relabel == "degree" else "degree"
            if kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, relabel) is None \
                    and kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, other):
                default = kernel1.variant_name(cfg.partitions, cfg.partitioning, cfg.dedupe, relabel)
                why = f"the variant stored ({default}, the default for --backend {B.name}, is not)"
                relabel = other
    cfg = replace(cfg, relabel=relabel, relabel_why=why)
    if not (cfg.quiet if quiet is None else quiet):
        say_relabel(cfg)
    return cfg


def say_relabel(cfg: RunConfig) -> None:
    """The one stderr line of a resolved ``--relabel auto`` (:func:`resolve_relabel`): the variant and why."""
    from dbfs import kernel1  # deferred: distributed (CLI start)

    variant = kernel1.variant_name(cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel)
    say(f"CSR variant {variant}, {'degree-relabelled' if cfg.relabel == 'degree' else 'not relabelled'}: "
        f"{cfg.relabel_why} (--relabel none|degree chooses)")


def get_backend(name: str) -> type:
    """The Backend class registered as ``name`` (its module imported now)."""
    try:
        spec = BACKENDS[name]
    except KeyError:
        raise DbfsError(f"unknown backend {name!r}: use one of {', '.join(BACKENDS)}") from None
    mod, cls = spec.split(":")
    return getattr(importlib.import_module(mod), cls)


def backend_table() -> list:
    """(name, algorithms, None or why unavailable) for every registered backend."""
    out = []
    for name in BACKENDS:
        B = get_backend(name)
        out.append((name, B.algorithms(), B.unavailable()))
    return out
