"""Pipeline specs: a YAML file of stages that ``dbfs pipeline run FILE`` executes.

Contract: :func:`load_spec` reads and checks a spec (a one-line DbfsError
naming the first bad key, value or stage and the fix; its ``cluster``
profile is loaded and checked and its ``scheduler`` must be an address,
whether or not a cluster will start); :func:`scheduler_for` says whether
the stages leave Dask any work (no cluster when every output is stored and
the run's backend searches in this process, as ``dbfs run`` decides);
:func:`run_spec` runs its stages in order, each reused when its output is
stored and complete (the same reuse as ``dbfs generate`` / ``build`` /
``run``), yielding ``(stage, result)``: the dataset name, the CSR variant
name, the RunResult.

Encoding (``pipelines/graph500.yaml`` is the reference example)::

    cluster: local            # optional: a cluster profile (as --cluster)
    stages:
      - generate: {kind: kronecker, scale: 16, edgefactor: 16, seed1: 2, seed2: 3}
      - build: {partitions: 1, partitioning: block, relabel: none, keep_duplicates: false}
      - run: {algorithm: do, backend: cpu, roots: 64, validate: true}

``generate`` comes first and once; ``build`` and ``run`` follow it; ``run``
searches the variant the ``build`` stage names (p1-block without one).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from dbfs import store
from dbfs.backends import RunConfig, get_backend
from dbfs.errors import DbfsError
from dbfs.kernel1.entry import Kernel1Options, kernel1_cpu
from dbfs.pipeline import run_graph500, stored_for_run
from dbfs.profiles import address_problem, load_profile
from dbfs.spec import GraphSpec
from dbfs.units import parse_size

__all__ = ["load_spec", "run_spec", "scheduler_for", "STAGE_KEYS"]

#: the keys each stage takes
STAGE_KEYS = {
    "generate": {"kind", "scale", "edgefactor", "seed1", "seed2", "a", "b", "c", "input", "chunk_edges", "backend"},
    "build": {"partitions", "partitioning", "relabel", "keep_duplicates", "memory_budget"},
    "run": {"algorithm", "backend", "roots", "validate", "device_memory_limit", "energy"},
}
_TOP_KEYS = {"stages", "cluster", "scheduler"}


def _bad(path, what: str):
    return DbfsError(f"pipeline spec {path}: {what}")


def load_spec(path) -> dict:
    """The checked spec of the YAML file ``path``: ``{"stages": [(name, options)], "cluster", "scheduler",
    "run_config"}``."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise _bad(p, f"cannot be read ({e.strerror}): pass a YAML file such as pipelines/graph500.yaml") from None
    except yaml.YAMLError as e:
        raise _bad(p, f"is not valid YAML ({type(e).__name__}): fix the file") from None
    if not isinstance(doc, dict):
        raise _bad(p, "must be a mapping with a 'stages' list: see pipelines/graph500.yaml")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise _bad(p, f"unknown key {unknown[0]!r}: the top-level keys are {', '.join(sorted(_TOP_KEYS))}")
    stages = doc.get("stages")
    if not isinstance(stages, list) or not stages:
        raise _bad(p, "key 'stages' must be a non-empty list of generate/build/run stages")
    out = []
    for i, st in enumerate(stages):
        if not isinstance(st, dict) or len(st) != 1:
            raise _bad(p, f"stage {i + 1} must be one mapping like '- generate: {{scale: 16}}'")
        (name, opts), = st.items()
        if name not in STAGE_KEYS:
            raise _bad(p, f"stage {i + 1} is {name!r}: use one of {', '.join(STAGE_KEYS)}")
        opts = {} if opts is None else opts
        if not isinstance(opts, dict):
            raise _bad(p, f"stage {i + 1} ({name}) must map option names to values")
        bad = sorted(set(opts) - STAGE_KEYS[name])
        if bad:
            raise _bad(p, f"stage {i + 1} ({name}) has unknown key {bad[0]!r}: use "
                          f"{', '.join(sorted(STAGE_KEYS[name]))}")
        out.append((name, opts))
    names = [n for n, _ in out]
    if names[0] != "generate" or names.count("generate") != 1:
        raise _bad(p, "the first stage must be 'generate', and only the first")
    if names.count("build") > 1 or names.count("run") > 1:
        raise _bad(p, "give 'build' and 'run' at most once each")
    spec = {"stages": out, "cluster": doc.get("cluster"), "scheduler": doc.get("scheduler"), "path": str(p)}
    _check_cluster(spec)
    spec["run_config"] = _run_config(spec)
    return spec


def _check_cluster(spec) -> None:
    """The spec's ``cluster`` profile loaded and checked, its ``scheduler`` an address (nothing started)."""
    for key in ("cluster", "scheduler"):
        if spec[key] is not None and not isinstance(spec[key], str):
            raise _bad(spec["path"], f"{key} is {spec[key]!r}: use a "
                                     + ("profile name or YAML file" if key == "cluster" else "tcp://HOST:PORT address"))
    if spec["cluster"]:
        load_profile(spec["cluster"])
    problem = address_problem(spec["scheduler"]) if spec["scheduler"] not in (None, "threads") else None
    if problem:
        raise _bad(spec["path"], f"scheduler {spec['scheduler']!r} is not a Dask scheduler address ({problem}): "
                                 f"use tcp://HOST:PORT, or threads to run without a cluster")


def _graph_spec(opts: dict):
    """The GraphSpec of a generate stage's options."""
    return GraphSpec.make(**{k: v for k, v in opts.items() if k not in ("chunk_edges", "backend")}, given=set(opts))


def scheduler_for(spec: dict, root_dir, scheduler, profile):
    """``scheduler``, or "threads" (no cluster) when none was asked for (no scheduler, no profile) and the
    stages leave Dask nothing to do: the dataset and the CSR variant stored complete and a run stage, if
    any, on a backend that does not search on Dask workers (the rule of ``dbfs run``)."""
    if scheduler or profile:
        return scheduler
    names = [n for n, _ in spec["stages"]]
    if "run" in names and get_backend(spec["run_config"].backend).cluster == "always":
        return scheduler
    g = _graph_spec(spec["stages"][0][1])
    if names == ["generate"]:
        try:
            done = store.stored(g, root_dir) is not None
        except DbfsError:
            done = False        # the generate stage itself reports it
    else:
        done = stored_for_run(g, root_dir, spec["run_config"])
    return "threads" if done else scheduler


def _run_config(spec):
    """The RunConfig the run stage uses (the build stage names the variant), checked against its backend."""
    b = dict(next((o for n, o in spec["stages"] if n == "build"), {}))
    r = dict(next((o for n, o in spec["stages"] if n == "run"), {}))
    try:
        cfg = RunConfig(algorithm=str(r.get("algorithm", "do")), backend=str(r.get("backend", "cpu")),
                        n_roots=int(r.get("roots", 64)), validate=bool(r.get("validate", True)),
                        partitions=int(b.get("partitions", 1)), partitioning=str(b.get("partitioning", "block")),
                        relabel=str(b.get("relabel", "none")), dedupe=not bool(b.get("keep_duplicates", False)),
                        energy=bool(r.get("energy", False)), device_memory_limit=parse_size(r.get("device_memory_limit"), "run device_memory_limit"))
    except (TypeError, ValueError) as e:
        raise _bad(spec["path"], f"a build/run value has the wrong type ({e}): use numbers for roots/partitions")
    given = {"roots": "n_roots"}
    opts = {given.get(k, k) for k in r} | {k for k in ("partitions", "partitioning", "relabel") if k in b}
    if b.get("keep_duplicates"):
        opts.add("dedupe")
    get_backend(cfg.backend).check(cfg, opts)
    return cfg


def run_spec(spec: dict, root_dir=None, client=None):
    """Run the checked ``spec``'s stages in order; yields (stage, result)."""
    cfg = spec["run_config"]
    ds = None
    for name, o in spec["stages"]:
        if name == "generate":
            g = _graph_spec(o)
            kw = {"chunk_edges": int(o["chunk_edges"])} if "chunk_edges" in o else {}
            ds, _ = store.generate(g, root_dir, client=client, backend=o.get("backend", "cpu"), **kw)
            yield name, ds.name
        elif name == "build":
            budget = parse_size(o.get("memory_budget"), "build memory_budget")
            variant, _ = kernel1_cpu(ds, Kernel1Options.of(cfg, quiet=False, memory_budget=budget), client)
            yield name, variant
        else:
            yield name, run_graph500(ds.name, root_dir, cfg, client)
