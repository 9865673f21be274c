"""A LocalCluster's workers bound to cores of their own (``dbfs.cluster.binding``).

What is checked: the blocks of logical CPUs are disjoint, of the workers' threads each, whole cores first
(SMT siblings together, read from a topology tree written here), None where the threads outnumber the
CPUs; on a real LocalCluster (worker processes) of a profile with ``bind_cores: true``, every thread of
each worker and a task thread started after the binding run on that worker's CPUs alone, the blocks
apart; without the key (the default) every worker keeps all of this process's CPUs; binding more threads
than CPUs, and ``bind_cores`` that is not a boolean, are one-line errors before any worker starts. The binding needs two CPUs (CI has two); with one the real-cluster tests skip.
"""
import os
import sys

import pytest

from dbfs.cluster.binding import core_blocks, describe, usable_cpus

try:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:
    pass


def _topology(root, cpus):
    """A /sys/devices/system/cpu tree: ``cpus`` maps a CPU number to its (package, core)."""
    for c, (pkg, core) in cpus.items():
        d = root / f"cpu{c}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


def test_blocks_hold_whole_cores_and_never_overlap(tmp_path):
    # 2 packages x 2 cores x 2 threads, the siblings numbered apart as Linux does (cpu c and c + 4)
    topo = _topology(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1),
                                4: (0, 0), 5: (0, 1), 6: (1, 0), 7: (1, 1)})
    b = core_blocks(4, 2, cpus=range(8), root=topo)
    assert b == {0: [0, 4], 1: [1, 5], 2: [2, 6], 3: [3, 7]}
    assert core_blocks(2, 4, cpus=range(8), root=topo) == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    assert core_blocks(3, 3, cpus=range(8), root=topo) is None          # 9 threads on 8 CPUs: left alone
    assert core_blocks(2, 2, cpus=[2, 3, 6, 7], root=topo) == {0: [2, 6], 1: [3, 7]}
    assert describe({0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}) == "0-3, 4-7"
    assert describe({0: [0, 4], 1: [1]}) == "0,4, 1"
    # no topology in the tree: the CPU numbers' order
    assert core_blocks(2, 2, cpus=[0, 1, 2, 3], root=tmp_path / "none") == {0: [0, 1], 1: [2, 3]}


def _affinities(dask_worker=None):
    """(client.run) the CPU sets of this worker process's threads."""
    return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})


def _task_affinity():
    return tuple(sorted(os.sched_getaffinity(0)))


needs_two = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(usable_cpus()) < 2,
                               reason="needs two CPUs to bind two workers apart")


@needs_two
def test_local_cluster_workers_run_on_cores_of_their_own(tmp_path):
    from dbfs.cluster import client_for

    prof = tmp_path / "bound.yaml"
    prof.write_text("type: local\nbind_cores: true\n")
    with client_for(n_workers=2, threads_per_worker=1, quiet=True, profile=str(prof)) as client:
        per = client.run(_affinities)
        assert all(len(sets) == 1 and len(sets[0]) == 1 for sets in per.values()), per
        cpus = sorted(sets[0][0] for sets in per.values())
        assert len(set(cpus)) == 2 and set(cpus) <= set(usable_cpus()), per
        for w, sets in per.items():       # a task thread started after the binding inherits it
            assert client.submit(_task_affinity, pure=False, workers=[w]).result() == sets[0]


@needs_two
def test_workers_are_left_unbound_by_default():
    from dbfs.cluster import client_for

    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as client:
        per = client.run(_affinities)
    assert all(sets == [tuple(usable_cpus())] for sets in per.values()), per


def test_binding_more_threads_than_cpus_is_refused(tmp_path):
    from dbfs.cluster import client_for
    from dbfs.errors import DbfsError

    prof = tmp_path / "bound.yaml"
    prof.write_text("type: local\nbind_cores: true\n")
    n = len(usable_cpus()) + 1
    with pytest.raises(DbfsError, match="bind_cores: true needs") as e:
        with client_for(n_workers=n, threads_per_worker=1, quiet=True, profile=str(prof)):
            pass
    assert "\n" not in str(e.value) and f"({n} x 1)" in str(e.value)


def test_bind_cores_must_be_a_boolean(tmp_path):
    from dbfs.cluster import load_profile
    from dbfs.errors import DbfsError

    prof = tmp_path / "bad.yaml"
    prof.write_text("type: local\nbind_cores: sometimes\n")
    with pytest.raises(DbfsError, match="bind_cores") as e:
        load_profile(str(prof))
    assert "\n" not in str(e.value) and "true or false" in str(e.value)
