"""Dask clusters for the long stages: a LocalCluster, SLURM worker jobs, or a running scheduler.

Contract
--------
- :func:`client_for` is a context manager yielding a ``distributed.Client``:
  no address starts a ``LocalCluster`` of worker PROCESSES (one per core, one
  thread each unless told otherwise); ``scheduler="tcp://host:port"`` joins
  that cluster and leaves it running on exit; ``scheduler="threads"`` yields
  None (the threaded scheduler, no cluster). Whatever it started it closes on
  exit, or earlier through :func:`release_local_cluster` (a LocalCluster's
  close is bounded by :data:`CLOSE_S`). The dashboard link goes to stderr.
  A local cluster's scheduler and dashboard listen on 127.0.0.1, on the
  ports given (``scheduler_port`` / ``dashboard_port``: arguments or profile
  keys; a taken port is a one-line error) or any free ones.
- Bad arguments are one-line errors before anything starts
  (:func:`check_cluster_args`: ``--workers`` below 1, a ``--scheduler`` that
  is no address).
- When the CLI configured a log file (:mod:`dbfs.worker_logs`), the Dask
  detail of the cluster (this process's client, scheduler and nannies, and a
  local cluster's worker processes) goes there, not to the terminal; a
  DbfsError leaving the block gets `` (Dask details: PATH)`` appended when the
  file holds something, and a lost worker, a task whose workers kept dying
  or a closed connection that ends the command becomes such a one-line
  error, its traceback in the file.
- A local cluster left without any worker for
  :data:`~dbfs.worker_deaths.NO_WORKERS_S` seconds (its nannies stopped
  restarting them) has its client closed (:class:`dbfs.worker_deaths.NoWorkers`):
  the command ends with one line saying so instead of waiting forever.
- A ``type: slurm`` profile submits its workers as SLURM jobs through
  dask-jobqueue (``pip install -e '.[slurm]'``; :class:`SlurmJobs`): all of
  them are awaited, a submission SLURM refuses or a job it will never start
  ends the wait at once with a one-line :class:`~dbfs.errors.DbfsError`, no
  library traceback reaches the user, and the jobs are cancelled on every
  exit (normal end, error, SIGINT, SIGTERM, SIGHUP; :mod:`dbfs.cluster.slurm`).
- :func:`load_profile` (:mod:`dbfs.profiles`) returns a checked profile:
  unknown keys, wrong types, sizes Dask cannot read and non-positive counts
  are one-line errors (:data:`SCHEMA`).

Method
------
Every worker gets :func:`worker_env`: its thread pools (Numba, OpenMP, MKL,
OpenBLAS) sized to its threads, so Numba kernels in concurrent tasks do not
oversubscribe the cores. A LocalCluster passes it with the Nanny's ``env=``
(applied after the worker re-imports ``__main__``), not
``pre-spawn-environ``: that one is set in the PARENT's environment while
workers spawn, and a Numba compile in the parent during that window pins its
thread count. So scripts that start clusters must not import
Numba-compiling modules at top level of ``__main__`` (dbfs's CLI does not).
A SLURM job exports it in its job script, before ``job_script_prologue``.
With the profile key ``bind_cores: true`` a LocalCluster binds each worker to
cores of its own (:mod:`dbfs.cluster.binding`; a one-line error where the
workers' threads outnumber this process's CPUs); by default the OS scheduler
places them.

Encoding
--------
A profile is a YAML mapping with ``type: local | local-gpu | slurm |
scheduler`` and the keys of that type in :data:`SCHEMA`
(``dbfs/profiles/README.md``). Names resolve through :func:`profile_dirs`.

Reference: dask-jobqueue ``SLURMCluster`` (jobqueue.dask.org).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import shutil
import signal
import threading
import time
import warnings

import dask
from distributed import Client, LocalCluster

from dbfs import worker_deaths, worker_logs
from dbfs.cluster import slurm
from dbfs.cluster.binding import BindCores, core_blocks, describe, usable_cpus
from dbfs.errors import DbfsError
from dbfs.profiles import (PROFILES_ENV, SCHEMA, check_cluster_args, check_port, load_profile,  # noqa: F401
                           profile_dirs, profile_names)
from dbfs.progress import say
from dbfs.worker_deaths import NoWorkers, lost_work, lost_work_line
from dbfs.worker_logs import NAME as QUIET, QuietDbfsErrors


@contextlib.contextmanager
def _workers_ignore_sigint():
    """SIGINT ignored while the LocalCluster spawns its worker processes (an ignored
    signal stays ignored in a spawned Python), so a terminal's Ctrl-C, which reaches the
    whole process group, stops the run through this process alone and the workers print
    no tracebacks of their own; this process's handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def worker_env(threads: int) -> dict:
    """Environment of every worker process: thread pools sized to the
    worker's threads, so Numba kernels in concurrent tasks do not
    oversubscribe the cores, and idle OpenMP threads that sleep at once
    (``OMP_WAIT_POLICY=PASSIVE``). A worker waits between the parallel loops
    of a level (on its peers' counts and claims); with OpenMP's default (spin,
    then sleep) its idle team spins through those waits and takes the cores
    its peers' kernels need, even where the workers' threads fit the cores
    (docs/DISTRIBUTED.md). A policy set in the environment is kept."""
    t = str(threads)
    return {"NUMBA_NUM_THREADS": t, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"), **QUIET_WORKER}


#: the worker plugin that binds a LocalCluster's workers to their cores
BIND = "dbfs-bind-cores"

#: no statistical profiler thread in dbfs's workers: its stack sampling takes the GIL a
#: search thread waits for (docs/DISTRIBUTED.md, GPU workers; the dashboard's Profile page
#: is empty, every other page works)
QUIET_WORKER = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}


def workers_per_job(prof: dict) -> int:
    """Dask workers one SLURM job of ``prof`` starts: ``processes``, or for a GPU job
    (``gpus_per_job``) one per GPU plus ``cpu_workers_per_job``."""
    g = int(prof.get("gpus_per_job") or 0)
    return g + int(prof.get("cpu_workers_per_job") or 0) if g else int(prof["processes"])


def slurm_cluster(prof: dict, job_name: str | None = None):
    """A dask-jobqueue ``SLURMCluster`` for a ``type: slurm`` profile.

    Parameters
    ----------
    prof : dict
        As :func:`load_profile` checked it and filled its defaults
        (processes and jobs 1, wait 600 s).
    job_name : str, optional
        The jobs' SLURM name (``#SBATCH -J``); dask-jobqueue's default
        (``dask-worker``) when None.

    Returns
    -------
    dask_jobqueue.SLURMCluster
        No job submitted yet (``cluster.job_script()`` shows what each job
        runs). Each job books ``cores`` and ``memory`` on one node and runs
        ``processes`` worker processes of ``cores // processes`` threads, with
        :func:`worker_env` exported before ``job_script_prologue``.
    """
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        from dask_jobqueue import SLURMCluster  # deferred: dask_jobqueue
    except ImportError:
        raise DbfsError("cluster profile type slurm needs dask-jobqueue: pip install -e '.[slurm]'") from None
    finally:
        if main:      # its import makes Ctrl-C a silent sys.exit() (exit 0): keep the interrupt
            signal.signal(signal.SIGINT, before)
    # a job's processes share the cores it asks for: never more threads than those cores
    prologue = [f"export {k}={v}" for k, v in worker_env(prof["cores"] // prof["processes"]).items()]
    extra = list(prof.get("job_extra_directives") or [])
    processes = prof["processes"]
    g = int(prof.get("gpus_per_job") or 0)
    kw = {}
    if g:       # a GPU job: dbfs.cluster.slurm_job starts `dask cuda worker` (one per GPU) and the CPU workers
        from dbfs.cluster.gpu import NO_SPILL_ENV  # deferred: cycle dbfs.cluster <-> dbfs.cluster.gpu

        processes = 1
        prologue += [f"export {k}={v}" for k, v in NO_SPILL_ENV.items()]
        kw["worker_command"] = "dbfs.cluster.slurm_job"
        extra.append(f"--gres=gpu:{g}")
        prologue += [f"export DBFS_JOB_GPUS={g}", f"export DBFS_JOB_GPU_THREADS={prof.get('gpu_threads') or 2}",
                     f"export DBFS_JOB_CPU_WORKERS={prof.get('cpu_workers_per_job') or 0}",
                     f"export DBFS_JOB_CPU_THREADS={prof.get('cpu_threads') or 1}"]
    kw.update({"cores": prof["cores"], "processes": processes, "memory": str(prof["memory"]),
               "job_script_prologue": prologue + list(prof.get("job_script_prologue") or []),
               "job_extra_directives": extra})
    if job_name is not None:
        kw["job_name"] = job_name
    for k in ("queue", "account", "walltime", "interface", "local_directory", "log_directory", "python"):
        if prof.get(k) is not None:
            kw[k] = prof[k]
    # its scheduler's dashboard asks for port 8787; where that is taken, distributed serves it on a free port
    # and warns on stderr: the link dbfs prints names the port, so no library line goes out
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Port \d+ is already in use", category=UserWarning)
        return SLURMCluster(**kw)


POLL_S = 2.0           # seconds between squeue calls while waiting for SLURM workers
REMIND_S = 60.0        # a waiting line at least this often while nothing changes


_NOISY = ("tornado.application", "asyncio", "distributed.deploy.spec", "dask_jobqueue")


class _Errors(logging.Handler):
    """Keeps (exception class, text) of records that carry an exception; keeps no record (nor its traceback)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.errors = []

    def emit(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            self.errors.append((type(exc).__name__, str(exc)))

    def failure(self) -> str | None:
        """The one-line error for the first failure to start a job, if any."""
        for cls, text in self.errors:
            if "sbatch" in text or "non-zero exit code" in text:
                return slurm.sbatch_failure(text)
        if self.errors:
            cls, text = self.errors[0]
            return (f"starting the SLURM worker jobs failed ({cls}: {text.strip().splitlines()[0] if text else ''}): "
                    f"check the profile and `dbfs cluster PROFILE --script`")
        return None


@contextlib.contextmanager
def _captured_logs():
    """The loggers through which the libraries report job start/stop errors, routed to an :class:`_Errors`."""
    h, saved = _Errors(), []
    for name in _NOISY:
        lg = logging.getLogger(name)
        saved.append((lg, lg.handlers[:], lg.propagate))
        lg.handlers, lg.propagate = [h], False
    try:
        yield h
    finally:
        gc.collect()        # asyncio reports never-retrieved task exceptions when the tasks are freed: here
        for lg, handlers, propagate in saved:
            lg.handlers, lg.propagate = handlers, propagate


class SlurmJobs:
    """The worker jobs of one dask-jobqueue ``SLURMCluster``: submitted, awaited, cancelled.

    Parameters
    ----------
    cluster : dask_jobqueue.SLURMCluster
        Built with ``job_name=name``, no job submitted yet.
    name : str
        The jobs' SLURM name (:func:`job_name`).
    prof : dict
        The checked profile (``jobs``, ``processes``, ``cores``, ``memory``,
        ``wait``, ``log_directory``, ...).
    """

    def __init__(self, cluster, name: str, prof: dict):
        self.cluster, self.name, self.prof = cluster, name, prof
        self.client = None
        self.quiet = False
        self._ids: set = set()
        self._guarded = self._closed = False
        self._fit = None

    def job_ids(self) -> list:
        """Ids of the jobs submitted so far (those dask-jobqueue recorded), in submission order."""
        for job in list(self.cluster.workers.values()):
            jid = getattr(job, "job_id", None)
            if jid:
                self._ids.add(str(jid))
        return sorted(self._ids, key=lambda j: (len(j), j))

    def start(self, quiet: bool = False):
        """Submit ``prof["jobs"]`` jobs and wait until all their workers connected.

        Returns
        -------
        distributed.Client
            Connected to the cluster's scheduler.

        Raises
        ------
        DbfsError
            One line, the jobs cancelled: sbatch refused a job, SLURM will
            never start one, one ended early, or ``wait`` seconds passed.
        """
        prof, self.quiet = self.prof, quiet
        self._guarded = slurm.guard_signals()
        with _captured_logs() as logs:
            try:
                self.cluster.scale(jobs=prof["jobs"])
                self.client = Client(self.cluster)
                say(f"submitted SLURMCluster ({prof['jobs']} jobs x {workers_per_job(prof)} worker processes"
                    + (f", {prof['gpus_per_job']} of them on GPUs" if prof.get("gpus_per_job") else
                       f" x {prof['cores'] // prof['processes']} threads")
                    + f"); dashboard: {self.client.dashboard_link}", quiet)
                say(f"waiting up to {float(prof['wait']):.0f} s for its {prof['jobs'] * workers_per_job(prof)} workers "
                    f"(`squeue --me -n {self.name}` shows the jobs)", quiet)
                self._await(logs)
            except BaseException:
                self.close()
                raise
        return self.client

    def close(self) -> None:
        """Close the client and the cluster and ``scancel`` whatever is left; restore the signal handlers.

        Idempotent. SIGINT/SIGTERM/SIGHUP arriving meanwhile are delivered after.
        """
        if self._closed:
            return
        self._closed = True
        with slurm.held_signals() as pending, _captured_logs():
            ids = set(self.job_ids())
            for step in ((self.client.close,) if self.client is not None else ()) + (self._close_cluster,):
                with contextlib.suppress(Exception):
                    step()
            slurm.scancel(ids | set(self.job_ids()), self.name, self.quiet)
        if self._guarded:
            slurm.unguard_signals()
        for s in pending:
            signal.raise_signal(s)

    def _close_cluster(self):
        self.cluster.close(timeout=60)

    def _await(self, logs: _Errors) -> None:
        """Poll until every worker connected; raise at the first sign that they never will."""
        want = self.prof["jobs"] * workers_per_job(self.prof)
        wait = float(self.prof["wait"])
        status = "no job queued yet"
        t0, next_poll, said, shown = time.monotonic(), 0.0, 0.0, (status, 0)    # the start line said this much
        while True:
            failure = logs.failure()
            if failure:
                raise DbfsError(failure)
            up = len(self.client.nthreads())
            if up >= want:
                return
            now = time.monotonic() - t0
            if now >= next_poll:
                next_poll = now + POLL_S
                states = self._poll()
                if states is None:
                    status = "squeue does not answer"
                elif states:
                    status = slurm.describe(states)
                if (status, up) != shown or now - said >= REMIND_S:
                    say(f"waiting for {want} SLURM workers ({up} connected, {now:.0f} of {wait:.0f} s): {status}",
                        self.quiet)
                    shown, said = (status, up), now
            if now >= wait:
                raise DbfsError(f"only {up} of {want} SLURM workers connected within {wait:.0f} s (jobs cancelled; "
                                f"last seen: {status}): raise wait in the profile, or check `squeue --me` and the "
                                f"job logs")
            time.sleep(0.2)

    def _poll(self) -> dict | None:
        """squeue states of the submitted jobs (None: squeue did not answer); raises for hopeless jobs."""
        ids = self.job_ids()
        states = slurm.squeue_states(ids)
        if states is None:
            return None
        for jid in ids:
            self._judge(jid, states.get(jid))
        return states

    def _judge(self, jid: str, st) -> None:
        if st is None:
            raise DbfsError(f"SLURM job {jid} left the queue before its workers connected: {self._log_hint(jid)}")
        verdict, why, keys = slurm.classify(*st)
        if verdict == "ended":
            raise DbfsError(f"SLURM job {jid} {why} before its workers connected: {self._log_hint(jid)}")
        if verdict not in ("never", "maybe"):
            return
        problems = self._fit_problems()
        if verdict == "maybe" and not problems:
            return                  # the request fits: the nodes are down/drained/reserved for now
        if problems:
            why += "; " + "; ".join(t for t, _ in problems)
            keys = tuple(dict.fromkeys(k for _, ks in problems for k in ks))
        raise DbfsError(f"SLURM will never start job {jid} (squeue reason {st[1]}): {why}: change "
                        f"{', '.join(keys)} in the profile (`dbfs cluster PROFILE --check` shows what fits)")

    def _fit_problems(self) -> list:
        """check_fit's problems against the current sinfo (none when sinfo does not answer); asked once."""
        if self._fit is None:
            try:
                self._fit = slurm.check_fit(self.prof, slurm.sinfo_nodes()).problems
            except DbfsError:
                self._fit = []
        return self._fit

    def _log_hint(self, jid: str) -> str:
        d = self.prof.get("log_directory")
        log = f"{d}/{self.name}-{jid}.err" if d else f"slurm-{jid}.out in the directory dbfs started in"
        return f"see its log ({log}); check python, job_script_prologue and interface in the profile"


def _start_slurm(prof: dict, quiet: bool) -> tuple:
    """(client, jobs): ``prof["jobs"]`` SLURM jobs submitted and all their workers connected (see :class:`SlurmJobs`)."""
    if shutil.which("sbatch") is None:
        raise DbfsError("cluster profile type slurm submits its workers with sbatch, which is not on PATH: run dbfs "
                        "on a SLURM login node or inside an allocation, or use --cluster local")
    name = slurm.job_name()
    jobs = SlurmJobs(slurm_cluster(prof, name), name, prof)
    return jobs.start(quiet), jobs


CLOSE_S = 30.0         # seconds closing a LocalCluster may take (a nanny left broken by killed workers never ends)


def default_workers() -> int:
    return max(1, len(usable_cpus()))


@contextlib.contextmanager
def client_for(scheduler: str | None = None, n_workers: int | None = None,
               threads_per_worker: int | None = None, memory_limit="auto", quiet: bool = False,
               profile: str | None = None, scheduler_port: int | None = None, dashboard_port: int | None = None):
    """A ``distributed.Client`` for the long stages (a context manager; see the module docstring).

    Parameters
    ----------
    scheduler : str, optional
        ``tcp://host:port`` joins that cluster and leaves it running;
        ``"threads"`` yields None (the threaded scheduler); None starts one.
    n_workers, threads_per_worker, memory_limit
        The LocalCluster's shape (a ``type: local`` profile's values by default).
    quiet : bool
        No status lines.
    profile : str, optional
        A cluster profile (:func:`load_profile`): local, local-gpu, scheduler or slurm.
    scheduler_port, dashboard_port : int, optional
        Ports on 127.0.0.1 of a local cluster's scheduler and dashboard (the
        profile's ``scheduler_port`` / ``dashboard_port`` by default; 0 or
        None: any free port).

    Yields
    ------
    distributed.Client or None
        On exit the cluster this call started is closed (SLURM jobs cancelled).
        While it runs, the Dask detail goes to the command's log file when the
        CLI configured one (:mod:`dbfs.worker_logs`), and a DbfsError leaving
        the block names that file.
    """
    check_cluster_args(scheduler, n_workers)
    prof = load_profile(profile) if profile else {}
    if prof.get("type") == "scheduler" and not scheduler:
        scheduler = prof["address"]
    if scheduler == "threads":
        yield None
        return
    ports = (scheduler_port if scheduler_port is not None else prof.get("scheduler_port") or 0,
             dashboard_port if dashboard_port is not None else prof.get("dashboard_port") or 0)
    log = worker_logs.DaskLog.create()
    try:
        with log if log is not None else contextlib.nullcontext():
            client = _connect(scheduler, prof, profile, n_workers, threads_per_worker, memory_limit, quiet, ports,
                              log)

            local = _STARTED.get(id(client), ("",))[0].startswith("Local")
            watchdog = NoWorkers(client) if local else None    # no wait hangs on a cluster left without workers
            try:
                yield client
            except Exception as e:
                reason = watchdog.reason if watchdog is not None else None
                if reason is None and (log is None or isinstance(e, DbfsError) or not isinstance(e, lost_work())):
                    raise
                if log is not None:     # what ended the command, for the record
                    log.add_exception(e)
                raise DbfsError(reason or lost_work_line(e)) from None
            finally:
                if watchdog is not None:
                    watchdog.stop()
                if not release_local_cluster(client):   # unless a run already did
                    client.close()                      # a joined cluster, left running
    except DbfsError as e:     # the one line names the file that holds the Dask detail, if any
        note = log.note() if log is not None else ""
        if note and e.args and note not in str(e.args[0]):
            e.args = (f"{e.args[0]}{note}",) + e.args[1:]
        raise


def _connect(scheduler, prof, profile, n_workers, threads_per_worker, memory_limit, quiet, ports, log):
    """The client of :func:`client_for`: joined to ``scheduler``, or of the cluster it starts (in ``_STARTED``)."""
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as e:
            raise DbfsError(f"cannot reach the Dask scheduler at {scheduler} ({e}): start it or drop --scheduler "
                            f"to use a local cluster") from None
        if not quiet:
            say(f"joined Dask cluster {scheduler}; dashboard: {client.dashboard_link}")
        return client

    worker_deaths.watch()     # a local cluster's nannies say here why a worker ended (one-line errors)
    if prof.get("type") == "slurm":
        client, jobs = _start_slurm(prof, quiet)
        _STARTED[id(client)] = ("SLURMCluster", jobs.close)
    elif prof.get("type") == "local-gpu":
        from dbfs.cluster.gpu import start_local_gpu  # deferred: cycle dbfs.cluster <-> dbfs.cluster.gpu

        check_port(ports[0], "scheduler port")
        check_port(ports[1], "dashboard port")
        client, close = start_local_gpu(prof, quiet, profile, ports, log.local_cluster_config() if log else {})
        _STARTED[id(client)] = ("LocalCUDACluster", close)
    else:
        client = _start_local(n_workers or prof.get("workers") or default_workers(),
                              threads_per_worker or prof.get("threads_per_worker") or 1,
                              prof.get("memory_limit") or memory_limit, quiet, ports, log,
                              bool(prof.get("bind_cores")))
    if log is None:         # worker output on the terminal: a task's DbfsError is said once, by the client
        client.register_plugin(QuietDbfsErrors(), name=QUIET)
    return client


def _start_local(n: int, threads: int, memory_limit, quiet: bool, ports: tuple, log, bind: bool = False):
    """The client of a LocalCluster of ``n`` worker processes x ``threads``, every worker registered and,
    where ``bind`` and they fit the cores, each bound to cores of its own (:mod:`dbfs.cluster.binding`)."""
    check_port(ports[0], "scheduler port")
    check_port(ports[1], "dashboard port")
    blocks = core_blocks(n, threads) if bind else None
    if bind and not blocks:
        raise DbfsError(f"bind_cores: true needs the workers' threads ({n} x {threads}) to fit this process's "
                        f"{len(usable_cpus())} CPUs: lower --workers or threads_per_worker, or drop bind_cores")
    with _workers_ignore_sigint(), dask.config.set(log.local_cluster_config() if log else {}):
        try:
            cluster = LocalCluster(n_workers=n, threads_per_worker=threads, processes=True,
                                   memory_limit=memory_limit, scheduler_port=ports[0],
                                   dashboard_address=f"127.0.0.1:{ports[1]}", host="127.0.0.1",
                                   env=worker_env(threads),
                                   silence_logs=40)
        except (RuntimeError, OSError) as e:
            raise DbfsError(f"the LocalCluster did not start ({e}): check --workers, the profile's memory_limit "
                            f"and ports") from None
    client = Client(cluster)
    try:        # every worker registered before the first task, so placements see them all
        client.wait_for_workers(n, timeout=120)
    except TimeoutError:
        client.close()
        cluster.close()
        raise DbfsError(f"the LocalCluster's {n} worker processes did not all start within 120 s: lower "
                        f"--workers or check memory") from None
    if blocks:
        client.register_plugin(BindCores(blocks), name=BIND)
    if not quiet:
        where = f", bound to cores {describe(blocks)}" if blocks else ""
        say(f"started LocalCluster ({n} worker processes x {threads} thread{where}); dashboard: "
            f"{client.dashboard_link}")
    _STARTED[id(client)] = ("LocalCluster", functools.partial(cluster.close, timeout=CLOSE_S))
    return client


# id(client) -> (class name, close) of the cluster client_for started for it (joined clusters are not here)
_STARTED: dict = {}


def release_local_cluster(client) -> str | None:
    """Close the cluster that :func:`client_for` started for ``client``.

    For the part of a run that needs no cluster (the timed searches of a
    single-process backend): idle, a cluster still runs its worker processes'
    periodic work and, in this process, the scheduler and the dashboard,
    which preempt the search threads on a small machine.

    Parameters
    ----------
    client : distributed.Client or None
        Closed too. A joined cluster is left alone.

    Returns
    -------
    str or None
        ``"LocalCluster"`` or ``"SLURMCluster"`` (its jobs cancelled); None
        when there is none.
    """
    kind, close = _STARTED.pop(id(client), (None, None)) if client is not None else (None, None)
    if close is None:
        return None
    client.close()
    # a worker slow to exit (freeing tens of GiB of pinned memory) times the close out: one line, not the
    # traceback that tornado would log for the cluster's own timed-out task
    quiet = logging.getLogger("tornado.application")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        close()
    except (TimeoutError, OSError) as e:
        say(f"closing the {kind} timed out ({type(e).__name__}): its worker processes exit with this one")
    finally:
        quiet.setLevel(level)
    return kind
