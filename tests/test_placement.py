"""GPU-worker placement and GPU cluster profiles, the parts that run without a GPU.

The placement policies are pure functions (:mod:`dbfs.bfs.dask.layout.assign`);
the profiles are loaded and their job scripts rendered for real (dask-jobqueue);
a machine without a GPU gets the one-line error of the local-gpu profile.
The GPU path itself is tested on the device (tests/test_dask_gpu.py).
"""
import pytest

from dbfs.bfs.dask.layout.assign import assign, move_lost, offer_order
from dbfs.errors import DbfsError

from conftest import _invoke_cli as run

KINDS = {"tcp://g0": "gpu", "tcp://c0": "cpu", "tcp://c1": "cpu"}


def test_cpu_only_is_round_robin():
    rw, rk = assign("block", 5, {"tcp://a": "cpu", "tcp://b": "cpu"}, [1] * 5, {})
    assert rw == {0: "tcp://a", 1: "tcp://b", 2: "tcp://a", 3: "tcp://b", 4: "tcp://a"}
    assert set(rk.values()) == {"cpu"}


def test_block_fills_gpu_in_rank_order_and_spills_to_cpu():
    rw, rk = assign("block", 6, KINDS, [10] * 6, {"tcp://g0": 35})
    assert [r for r in range(6) if rk[r] == "gpu"] == [0, 1, 2]
    assert {rw[r] for r in (3, 4, 5)} == {"tcp://c0", "tcp://c1"}
    assert all(rw[r] == "tcp://g0" for r in (0, 1, 2))


def test_random_is_seeded_and_bounded():
    a = assign("random", 8, KINDS, [10] * 8, {"tcp://g0": 40}, seed=7)
    b = assign("random", 8, dict(reversed(list(KINDS.items()))), [10] * 8, {"tcp://g0": 40}, seed=7)
    assert a == b
    gpu = [r for r in range(8) if a[1][r] == "gpu"]
    assert len(gpu) == 4 and gpu == sorted(offer_order("random", 8, 7)[:4])
    assert gpu != [0, 1, 2, 3] or offer_order("random", 8, 7)[:4] == [0, 1, 2, 3]


def test_gpu_share_never_exceeds_budget():
    sizes = [5, 30, 7, 12, 9, 3]
    rw, rk = assign("block", 6, {"tcp://g0": "gpu", "tcp://g1": "gpu", "tcp://c": "cpu"}, sizes,
                    {"tcp://g0": 20, "tcp://g1": 15})
    for w, cap in (("tcp://g0", 20), ("tcp://g1", 15)):
        assert sum(sizes[r] for r in range(6) if rw[r] == w) <= cap
    assert rk[1] == "cpu"                      # 30 fits no GPU


def test_no_room_without_cpu_workers_is_one_line():
    with pytest.raises(DbfsError) as ei:
        assign("block", 3, {"tcp://g0": "gpu"}, [10, 10, 10], {"tcp://g0": 15})
    msg = str(ei.value)
    assert "--device-memory-limit" in msg and "[1, 2]" in msg and "\n" not in msg


def test_unknown_placement():
    with pytest.raises(DbfsError, match="unknown placement 'degre'"):
        assign("degre", 2, KINDS, [1, 1], {"tcp://g0": 10})


def test_move_lost_prefers_gpu_with_room_then_cpu():
    kinds = {"tcp://g1": "gpu", "tcp://c0": "cpu"}
    moved, kind = move_lost([0, 1], {0: "gpu", 1: "gpu", 2: "cpu"}, {0: "tcp://g0", 1: "tcp://g0", 2: "tcp://c0"},
                            kinds, [10, 10, 10], {"tcp://g1": 15})
    assert (moved[0], kind[0]) == ("tcp://g1", "gpu")
    assert (moved[1], kind[1]) == ("tcp://c0", "cpu")      # no room left on the GPU


def test_local_gpu_profile_without_gpu_is_one_line(tmp_path):
    from dbfs.cluster.gpu import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU: the error is for machines without one")
    res = run("generate", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", "local-gpu", ok=False)
    err = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(err) == 1, res.stderr
    assert "pip install -e '.[gpu]'" in err[0] and "--cluster local" in err[0]


def test_profiles_load_and_check():
    from dbfs.cluster import load_profile, workers_per_job

    lg = load_profile("local-gpu")
    assert lg["type"] == "local-gpu" and lg["cpu_workers"] == 0
    sg = load_profile("slurm-gpu")
    assert sg["gpus_per_job"] == 1 and workers_per_job(sg) == 1 + sg["cpu_workers_per_job"]


def test_local_gpu_schema_errors(tmp_path):
    from dbfs.cluster import load_profile

    p = tmp_path / "g.yaml"
    p.write_text("type: local-gpu\ncpu_worker: 2\n")
    with pytest.raises(DbfsError, match="did you mean 'cpu_workers'"):
        load_profile(str(p))
    p.write_text("type: local-gpu\ncpu_workers: -1\n")
    with pytest.raises(DbfsError, match="cpu_workers is -1"):
        load_profile(str(p))


def test_slurm_gpu_script_starts_cuda_and_cpu_workers():
    res = run("cluster", "slurm-gpu", "--script")
    out = res.stdout
    assert "#SBATCH --gres=gpu:1" in out
    assert "-m dbfs.cluster.slurm_job tcp://" in out
    assert "export DBFS_JOB_CPU_WORKERS=1" in out
    # the workers never spill a partition to disk nor pause (dbfs.cluster.gpu.NO_SPILL), as on local-gpu
    for k in ("TARGET", "SPILL", "PAUSE"):
        assert f"export DASK_DISTRIBUTED__WORKER__MEMORY__{k}=False" in out


def test_slurm_job_commands():
    from dbfs.cluster.slurm_job import commands

    cmds = commands(["tcp://10.0.0.1:8786", "--name", "j", "--nthreads", "16", "--memory-limit", "64GiB",
                     "--death-timeout", "60"], {"DBFS_JOB_GPUS": "2", "DBFS_JOB_CPU_WORKERS": "2",
                                               "DBFS_JOB_CPU_THREADS": "4"})
    (gpu, genv), (cpu, cenv) = cmds
    assert gpu[1:4] == ["-m", "dask_cuda.cli", "tcp://10.0.0.1:8786"] and "GPU=1" in gpu
    assert cpu[cpu.index("--nworkers") + 1] == "2" and cpu[cpu.index("--nthreads") + 1] == "4"
    assert cenv["CUDA_VISIBLE_DEVICES"] == ""
    assert gpu[gpu.index("--memory-limit") + 1] == "16.00GiB"       # 64 GiB over 2 GPU + 2 CPU workers


def test_placement_flag_refused_off_dask(tmp_path):
    res = run("run", "--scale", 6, "--backend", "cpu", "--placement", "random", "--datasets", tmp_path, ok=False)
    # the cpu backend takes the GPU backend's row orders (a simulated device/host split), not random
    assert res.exit_code == 2 and "--placement random does not apply to --backend cpu" in res.stderr


def test_device_memory_limit_without_gpu_workers(tmp_path):
    res = run("run", "--scale", 8, "--backend", "dask", "--workers", 1, "--device-memory-limit", "1GiB",
              "--roots", 1, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "no GPU worker" in res.stderr and len(res.stderr.strip().splitlines()) >= 1


def test_degree_orders():
    assert offer_order("degree", 4) == [0, 1, 2, 3]           # rank 0 of a -deg variant holds the hubs
    assert offer_order("degree-low", 4) == [3, 2, 1, 0]
    rw, rk = assign("degree-low", 4, KINDS, [40, 20, 10, 5], {"tcp://g0": 16})
    assert [r for r in range(4) if rk[r] == "gpu"] == [2, 3]
    rw, rk = assign("degree", 4, KINDS, [40, 20, 10, 5], {"tcp://g0": 16})
    assert [r for r in range(4) if rk[r] == "gpu"] == [2, 3]   # the hubs' ranks do not fit: first fit goes on


def test_validate_batch_of_a_worker_built_csr():
    """Searches validated per read of the edges on a GPU (dbfs.validate.gpu.batch_size): bounded by the
    validation's peak (K searches' parents, (level, parent) table rows and flags beside one pointer jumping)
    and by the most asked, never below 1."""
    from dbfs.validate.gpu import _MARGIN, VALIDATE_MOST, batch_size

    G, n = 1 << 30, 1 << 30                   # SCALE 30, int32 ids: 13 B per search, 22 B the validation's own
    assert batch_size(int(61.9 * G), n, 4) == 2              # what the H200 leaves after the split CSR
    assert batch_size(int(61.9 * G), n, 1) == 1              # the most asked
    assert batch_size(_MARGIN + 22 * n + 13 * n - 1, n, 4) == 1 == batch_size(0, n, 4)
    assert batch_size(_MARGIN + 22 * n + 39 * n, n, 8) == 3
    assert batch_size(_MARGIN + 42 * (1 << 33) + 50 * (1 << 33), 1 << 33, 8) == 2   # int64 ids past 2^31
    assert batch_size(1 << 50, n) == VALIDATE_MOST
