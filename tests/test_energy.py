"""GPU energy metering (dbfs.energy) and the GreenGraph500 MTEPS/W figure.

The unmarked tests run everywhere: the missing-NVML tests point the loader at
a library name that does not exist, so they behave the same on GPU machines.
Tests marked ``gpu`` need NVML and an NVIDIA device and skip without one.
"""
import time

import pytest

from dbfs import energy
from dbfs.energy import PowerMeter, _integrate, available, mteps_per_watt
from dbfs.errors import DbfsError


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setattr(energy, "_LIBS", ("libnvidia-ml-dbfs-test-missing.so.1",))


@pytest.fixture
def meter():
    if not available():
        pytest.skip("no NVML / NVIDIA device")
    m = PowerMeter(interval=0.01)
    yield m
    m.close()


# ------------------------------------------------------------ no NVML
def test_available_false_without_nvml(no_nvml):
    assert available() is False


def test_power_meter_without_nvml_raises(no_nvml):
    with pytest.raises(DbfsError) as e:
        PowerMeter()
    msg = str(e.value)
    assert "NVML" in msg and "--energy" in msg and "\n" not in msg


def test_bad_interval_raises():
    with pytest.raises(DbfsError, match="interval"):
        PowerMeter(interval=0)


# ------------------------------------------------------------ MTEPS/W
def test_mteps_per_watt():
    assert mteps_per_watt(2e9, 400.0) == pytest.approx(5.0)
    assert mteps_per_watt(1e6, 1.0) == pytest.approx(1.0)
    assert mteps_per_watt(0.0, 250.0) == 0.0


@pytest.mark.parametrize("watts", [0.0, -5.0, float("nan")])
def test_mteps_per_watt_rejects_nonpositive_power(watts):
    with pytest.raises(DbfsError, match="positive mean power"):
        mteps_per_watt(1e9, watts)


# ------------------------------------------------------------ integration
def test_integrate_constant():
    assert _integrate([0.0, 2.0], [100.0, 100.0]) == pytest.approx(200.0)
    t = [i * 0.01 for i in range(201)]
    assert _integrate(t, [100.0] * len(t)) == pytest.approx(200.0)


def test_integrate_ramp_and_uneven_steps():
    # 0 -> 100 W linearly over 2 s: 100 J, exact for the trapezoid rule
    t = [0.0, 0.3, 0.35, 1.0, 2.0]
    assert _integrate(t, [50.0 * x for x in t]) == pytest.approx(100.0)
    # a step: 100 W for 1 s, then 300 W for 1 s, sampled at the edges
    assert _integrate([0.0, 1.0, 1.0, 2.0], [100.0, 100.0, 300.0, 300.0]) == pytest.approx(400.0)


def test_integrate_degenerate():
    assert _integrate([], []) == 0.0
    assert _integrate([1.0], [250.0]) == 0.0
    with pytest.raises(ValueError):
        _integrate([0.0, 1.0], [1.0])


# ------------------------------------------------------------ real GPU
def _check_window(r, meter):
    assert r["joules"] > 0
    assert 5 <= r["mean_watts"] <= 2000
    assert r["samples"] >= 2
    assert r["method"] in ("energy_counter", "power_sampling")
    assert r["device"] == meter.device and r["device"]
    assert r["mean_watts"] == pytest.approx(r["joules"] / r["seconds"])


@pytest.mark.gpu
def test_power_meter_windows(meter):
    with meter.window() as w:
        time.sleep(0.5)
    a = w.result
    _check_window(a, meter)
    assert 0.5 <= a["seconds"] < 5
    meter.start()
    time.sleep(0.5)
    b = meter.stop()
    _check_window(b, meter)
    t = meter.total()
    assert t["joules"] == pytest.approx(a["joules"] + b["joules"])
    assert t["seconds"] == pytest.approx(a["seconds"] + b["seconds"])
    assert t["samples"] == a["samples"] + b["samples"]
    assert t["mean_watts"] == pytest.approx(t["joules"] / t["seconds"])
    assert mteps_per_watt(1e9, t["mean_watts"]) > 0


@pytest.mark.gpu
def test_power_meter_misuse_and_close(meter):
    with pytest.raises(DbfsError, match="without start"):
        meter.stop()
    meter.start()
    with pytest.raises(DbfsError, match="already started"):
        meter.start()
    meter.close()
    meter.close()
    with pytest.raises(DbfsError, match="closed"):
        meter.start()


@pytest.mark.gpu
def test_power_meter_bad_device_index():
    if not available():
        pytest.skip("no NVML / NVIDIA device")
    with pytest.raises(DbfsError, match="NVML"):
        PowerMeter(device_index=4096)
