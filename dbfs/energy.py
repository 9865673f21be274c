"""GPU energy during timed BFS searches, as the GreenGraph500 list reports it.

Contract
--------
GreenGraph500 ranks by energy efficiency, MTEPS/W = (TEPS / 1e6) / mean watts,
where the mean power is taken over the timed searches
(:func:`mteps_per_watt`). :class:`PowerMeter` measures one NVIDIA GPU:
``start()`` opens a window and ``stop()`` closes it, returning
``{"joules", "seconds", "mean_watts", "samples", "method", "device"}`` in
J, s and W; ``total()`` sums all windows so far (its method is "mixed" if
windows differ, None before any). The sampler only reads NVML: it adds no
synchronisation to the timed region. :func:`available` says, never raising,
whether a meter can be opened. Every failure is a
:class:`~dbfs.errors.DbfsError` naming the problem and the fix.

Method: NVML called directly with :mod:`ctypes` (``libnvidia-ml.so.1``,
shipped with the driver), so no Python package is needed. Joules come from
the GPU's energy counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and
newer, ``method="energy_counter"``) or, where that is unsupported or did not
advance within the window, from trapezoidal integration of power samples
(``nvmlDeviceGetPowerUsage``, ``method="power_sampling"``). Power is sampled
every ``interval`` seconds by a daemon thread, plus once at start and once at
stop, so even a very short window has two samples.

Encoding: NVML reports energy in mJ and power in mW; this module converts
both to J and W at the read.

Citations: the Green Graph 500 list (https://green.graph500.org), rules for
the energy-efficiency metric; NVIDIA NVML API Reference, "Device Queries"
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html).
"""
import contextlib
import ctypes
import threading
import time
import types

from dbfs.errors import DbfsError

_LIBS = ("libnvidia-ml.so.1", "libnvidia-ml.so")
_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
_NAME_LEN = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE


def _load_nvml():
    """The NVML shared library as a ctypes CDLL; DbfsError when it is absent."""
    for name in _LIBS:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.nvmlErrorString.restype = ctypes.c_char_p
        return lib
    raise DbfsError("--energy needs NVML (libnvidia-ml.so.1, shipped with the NVIDIA driver): "
                    "not found on this machine; run without --energy")


def _check(lib, rc, what):
    if rc != 0:
        msg = lib.nvmlErrorString(rc).decode(errors="replace")
        raise DbfsError(f"--energy: NVML {what} failed ({msg}); check the NVIDIA driver "
                        "and device index, or run without --energy")


def _integrate(times, watts):
    """Energy in J from power samples (W) at times (s), by the trapezoid rule."""
    if len(times) != len(watts):
        raise ValueError("times and watts differ in length")
    return float(sum((t1 - t0) * (w0 + w1) / 2.0
                     for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:])))


def mteps_per_watt(teps, mean_watts):
    """GreenGraph500 efficiency: (teps / 1e6) / mean_watts."""
    if not mean_watts > 0:
        raise DbfsError(f"MTEPS/W needs a positive mean power, got {mean_watts} W; "
                        "measure a longer window or check the power meter")
    return (teps / 1e6) / mean_watts


def available():
    """True when NVML loads and reports at least one device; never raises."""
    try:
        lib = _load_nvml()
        if lib.nvmlInit_v2() != 0:
            return False
        n = ctypes.c_uint(0)
        try:
            return lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 and n.value > 0
        finally:
            lib.nvmlShutdown()
    except Exception:
        return False


class PowerMeter:
    """Energy of one GPU over measurement windows; opens NVML on construction."""

    def __init__(self, device_index=0, interval=0.01):
        if not interval > 0:
            raise DbfsError(f"power sampling interval must be > 0 s, got {interval}; pass a positive one")
        self.interval = float(interval)
        self._thread, self._windows = None, []
        self._lib = lib = _load_nvml()
        _check(lib, lib.nvmlInit_v2(), "init")
        self._open, self._handle = True, ctypes.c_void_p()
        try:
            rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(device_index), ctypes.byref(self._handle))
            _check(lib, rc, f"handle for GPU {device_index}")
            buf = ctypes.create_string_buffer(_NAME_LEN)
            _check(lib, lib.nvmlDeviceGetName(self._handle, buf, ctypes.c_uint(_NAME_LEN)), "device name")
            self.device = buf.value.decode(errors="replace")
            self._counter = self._energy() is not None
            self._power()
        except BaseException:
            self.close()
            raise

    def _power(self):
        mw = ctypes.c_uint(0)
        _check(self._lib, self._lib.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(mw)), "power usage")
        return mw.value / 1000.0

    def _energy(self):
        """Energy counter in J, or None where the GPU does not support it."""
        mj = ctypes.c_ulonglong(0)
        rc = self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(mj))
        if rc == _NOT_SUPPORTED:
            return None
        _check(self._lib, rc, "total energy consumption")
        return mj.value / 1000.0

    def _sample_loop(self):
        try:
            while not self._halt.wait(self.interval):
                self._samples.append((time.perf_counter(), self._power()))
        except DbfsError as e:
            self._error = e

    def _join(self):
        self._halt.set()
        self._thread.join()
        self._thread = None

    def start(self):
        """Begin a window: read the energy counter and start the sampler thread."""
        if not self._open:
            raise DbfsError("PowerMeter is closed; create a new one")
        if self._thread is not None:
            raise DbfsError("PowerMeter window already started; call stop() first")
        self._error, self._halt = None, threading.Event()
        self._e0 = self._energy() if self._counter else None
        self._samples = [(time.perf_counter(), self._power())]
        self._thread = threading.Thread(target=self._sample_loop, name="dbfs-power", daemon=True)
        self._thread.start()

    def stop(self):
        """End the window; return its joules, seconds, mean_watts, samples, method, device."""
        if self._thread is None:
            raise DbfsError("PowerMeter.stop() without start(); call start() first")
        self._join()
        if self._error is not None:
            raise self._error
        self._samples.append((time.perf_counter(), self._power()))
        e1 = self._energy() if self._counter else None
        times, watts = zip(*self._samples)
        seconds = times[-1] - times[0]
        if e1 is not None and e1 > self._e0:
            joules, method = e1 - self._e0, "energy_counter"
        else:  # no counter, or it did not tick within a very short window
            joules, method = _integrate(times, watts), "power_sampling"
        mean = joules / seconds if seconds > 0 else sum(watts) / len(watts)
        r = {"joules": joules, "seconds": seconds, "mean_watts": mean,
             "samples": len(watts), "method": method, "device": self.device}
        self._windows.append(r)
        return r

    def total(self):
        """All windows so far: summed joules, seconds, samples; mean_watts = joules / seconds."""
        ws = self._windows
        joules, seconds = sum(w["joules"] for w in ws), sum(w["seconds"] for w in ws)
        methods = {w["method"] for w in ws}
        return {"joules": joules, "seconds": seconds,
                "mean_watts": joules / seconds if seconds > 0 else 0.0,
                "samples": sum(w["samples"] for w in ws),
                "method": methods.pop() if len(methods) == 1 else ("mixed" if methods else None),
                "device": self.device}

    @contextlib.contextmanager
    def window(self):
        """One window as a context manager: ``with m.window() as w: ...`` then ``w.result``."""
        w = types.SimpleNamespace(result=None)
        self.start()
        try:
            yield w
        finally:
            w.result = self.stop()

    def close(self):
        """Stop any running window and shut NVML down; safe to call twice."""
        if self._thread is not None:
            self._join()
        if self._open:
            self._open = False
            self._lib.nvmlShutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
