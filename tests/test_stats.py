"""Graph500 statistics and the 3.0.1 output block (specification 2.0, section 9)."""
import math

import numpy as np
import pytest

from dbfs.report.stats import (VALUE_COLUMN, format_graph500, format_value, graph500_fields, graph500_stats,
                               render_graph500, teps_stats)

INT_KEYS = {"SCALE", "edgefactor", "NBFS", "num_mpi_processes"}


def parse_sample(text):
    """[(key, value_text)] from the reference stdout."""
    out = []
    for line in text.splitlines():
        key, rest = line.split(":", 1)
        out.append((key, rest.replace("!", "").strip()))
    return out


def fmt_of(key):
    return "d" if key in INT_KEYS else ".11g" if key.endswith("_nedge") else "g"


# ------------------------------------------------------------ statistics
def test_quartiles_even_count():
    s = graph500_stats([4, 1, 3, 2])
    assert s == pytest.approx({"min": 1, "firstquartile": 1.5, "median": 2.5, "thirdquartile": 3.5,
                               "max": 4, "mean": 2.5, "stddev": math.sqrt(5 / 3)})


def test_quartiles_odd_count():
    s = graph500_stats([5, 1, 4, 2, 3])
    assert (s["min"], s["firstquartile"], s["median"], s["thirdquartile"], s["max"]) == (1, 2, 3, 4, 5)
    assert s["stddev"] == pytest.approx(math.sqrt(2.5))


def test_quartiles_rule_for_n_6_and_7():
    # n = 6: q1 = (x[1] + x[1]) / 2, median = (x[2] + x[3]) / 2, q3 = (x[4] + x[4]) / 2
    s = graph500_stats([10, 20, 30, 40, 50, 60])
    assert (s["firstquartile"], s["median"], s["thirdquartile"]) == (20, 35, 50)
    # n = 7: q1 = (x[1] + x[1]) / 2, q3 = (x[5] + x[5]) / 2
    s = graph500_stats([1, 2, 3, 4, 5, 6, 7])
    assert (s["firstquartile"], s["median"], s["thirdquartile"]) == (2, 4, 6)
    # n = 8: q1 = (x[1] + x[2]) / 2, q3 = (x[5] + x[6]) / 2
    s = graph500_stats(range(8))
    assert (s["firstquartile"], s["median"], s["thirdquartile"]) == (1.5, 3.5, 5.5)


def test_single_value_has_nan_stddev():
    s = graph500_stats([3.0])
    assert s["min"] == s["max"] == s["median"] == 3.0 and math.isnan(s["stddev"])


def test_teps_hand_example():
    times = [1.0, 2.0, 4.0]
    nedges = [4, 4, 4]
    t = teps_stats(times, nedges)
    s = np.array([0.25, 0.5, 1.0])
    assert t["harmonic_mean"] == pytest.approx(1 / s.mean())          # 12/7
    assert t["harmonic_stddev"] == pytest.approx(s.std(ddof=1) / (s.mean() ** 2 * math.sqrt(2)))
    assert (t["min"], t["max"]) == (1.0, 4.0)                         # 1 / max s, 1 / min s
    assert t["median"] == 2.0
    assert (t["firstquartile"], t["thirdquartile"]) == (1.0, 4.0)     # 1 / q3(s), 1 / q1(s)
    assert t["mean"] == pytest.approx((4 + 2 + 1) / 3)


def test_teps_quartiles_are_inverse_of_opposite_quartiles():
    rng = np.random.default_rng(3)
    times = rng.uniform(0.01, 0.03, 64)
    nedges = rng.integers(900_000, 1_100_000, 64)
    t = teps_stats(times, nedges)
    s = graph500_stats(times / nedges)
    assert t["min"] == 1 / s["max"] and t["max"] == 1 / s["min"]
    assert t["firstquartile"] == 1 / s["thirdquartile"] and t["thirdquartile"] == 1 / s["firstquartile"]
    assert t["median"] == 1 / s["median"]
    # the harmonic mean of TEPS is total-time weighted, not the mean of TEPS
    assert t["harmonic_mean"] == pytest.approx(len(times) / np.sum(times / nedges))
    assert t["harmonic_mean"] < t["mean"]


# ------------------------------------------------------------ formatting
def test_format_value_is_c_printf():
    assert format_value(0.0514238) == "0.0514238"
    assert format_value(52459800.0) == "5.24598e+07"
    assert format_value(1048079.0, ".11g") == "1048079"
    assert format_value(0.0, ".11g") == "0"
    assert format_value(16, "d") == "16"
    assert format_value(0.06631) == "0.06631"
    assert format_value(123456789.0) == "1.23457e+08"


def test_sample_reproduced_line_by_line(golden_stdout):
    fields = [(k, float(v), fmt_of(k)) for k, v in parse_sample(golden_stdout)]
    assert render_graph500(fields) == golden_stdout
    for line in golden_stdout.splitlines():
        assert line[VALUE_COLUMN - 2] == " " and line[VALUE_COLUMN - 1] != " "
    assert "bfs  harmonic_mean_TEPS:     !  5.24598e+07\n" in golden_stdout


def _within_print(text, ok=lambda x: True, fmt="%g"):
    """A number that C prints as ``text`` and satisfies ``ok``: the middle
    of all such candidates on a fine grid over the rounding interval."""
    x = float(text)
    digits = len(text.split("e")[0].replace(".", "").replace("-", "").lstrip("0"))
    exp = math.floor(math.log10(abs(x)))
    half = 0.5 * 10.0 ** (exp - digits + 1)
    grid = np.linspace(x - half, x + half, 4001)
    good = [c for c in grid if fmt % c == text and ok(c)]
    assert good, f"no number prints as {text} and meets the constraint"
    return good[len(good) // 2]


def _times_with_stats(st, n=64):
    """n values whose Graph500 statistics are exactly those given."""
    from scipy.optimize import least_squares

    lo, q1, med, q3, hi, mean, sd = (st[k] for k in ("min", "firstquartile", "median", "thirdquartile",
                                                      "max", "mean", "stddev"))
    fixed = {0: lo, 15: q1, 16: q1, 31: med, 32: med, 47: q3, 48: q3, 63: hi}
    free = [i for i in range(n) if i not in fixed]
    bounds = [(lo, q1) if i < 15 else (q1, med) if i < 31 else (med, q3) if i < 47 else (q3, hi) for i in free]
    lb, ub = np.array(bounds).T

    def build(x):
        v = np.empty(n)
        for i, val in fixed.items():
            v[i] = val
        v[free] = x
        return v

    def resid(x):
        v = build(x)
        return [(v.mean() - mean) / mean, (v.std(ddof=1) - sd) / sd]

    sol = least_squares(resid, (lb + ub) / 2, bounds=(lb, ub), xtol=1e-15, ftol=1e-15, gtol=1e-15)
    return build(sol.x)


def test_format_graph500_reproduces_sample_from_raw_numbers(golden_stdout):
    """Per-search times whose statistics print as the sample's do, fed through
    format_graph500 with constant nedge, reproduce the whole sample: the time
    and TEPS lines (TEPS = nedge / time statistics) agree with each other."""
    vals = dict(parse_sample(golden_stdout))
    nedge = int(vals["min_nedge"])
    n = int(vals["NBFS"])
    teps_of = {"min": "max", "firstquartile": "thirdquartile", "median": "median",
               "thirdquartile": "firstquartile", "max": "min"}
    st = {}
    for tk, qk in teps_of.items():
        want = vals[f"bfs  {qk}_TEPS"]
        st[tk] = _within_print(vals[f"bfs  {tk}_time"], lambda t, w=want: "%g" % (nedge / t) == w)
    st["mean"] = _within_print(vals["bfs  mean_time"],
                               lambda m: "%g" % (nedge / m) == vals["bfs  harmonic_mean_TEPS"])
    st["stddev"] = _within_print(
        vals["bfs  stddev_time"],
        lambda sd: "%g" % (sd * nedge / (st["mean"] ** 2 * math.sqrt(n - 1))) == vals["bfs  harmonic_stddev_TEPS"])
    times = _times_with_stats(st, n)
    vst = {k: _within_print(vals[f"bfs  {k}_validate"])
           for k in ("min", "firstquartile", "median", "thirdquartile", "max", "mean", "stddev")}
    vtimes = _times_with_stats(vst, n)
    np.random.default_rng(0).shuffle(times)  # order must not matter
    text = format_graph500(scale=16, edgefactor=16, nbfs=n, graph_generation=float(vals["graph_generation"]),
                           num_mpi_processes=2, construction_time=float(vals["construction_time"]),
                           times=times, nedges=[nedge] * n, validate_times=vtimes)
    assert text == golden_stdout


def test_format_graph500_keys_and_extras(golden_stdout):
    keys = [k for k, _ in parse_sample(golden_stdout)]
    rng = np.random.default_rng(1)
    text = format_graph500(20, 16, 8, 1.5, 1, 2.5, rng.uniform(0.01, 0.02, 8),
                           rng.integers(1 << 23, 1 << 24, 8), rng.uniform(0.1, 0.2, 8),
                           extra={"load_time": 0.25, "num_workers": 4})
    lines = text.splitlines()
    assert [ln.split(":")[0] for ln in lines] == keys + ["load_time", "num_workers"]
    assert lines[-2] == "load_time:".ljust(VALUE_COLUMN - 1) + "0.25"
    assert lines[-1] == "num_workers:".ljust(VALUE_COLUMN - 1) + "4"
    assert all(len(ln) >= VALUE_COLUMN and ln[VALUE_COLUMN - 2] == " " for ln in lines)
    f = dict((k, v) for k, v, _ in graph500_fields(20, 16, 8, 1.5, 1, 2.5, [1.0, 2.0], [10, 10], [1.0, 1.0]))
    assert f["bfs  harmonic_mean_TEPS"] == pytest.approx(20 / 3)
    assert f["mean_nedge"] == 10 and f["stddev_nedge"] == 0
