"""Monitoring end to end, in a real headless browser (Debian's chromium + chromedriver, Selenium).

README's "Monitoring" commands run as written, in a scratch folder:

1. ``dbfs run --scale 14 --roots 8 --backend dask --partitions 2 --report run.html`` starts its
   own LocalCluster; while it runs, the browser opens the dashboard's ``dbfs`` page (the link
   dbfs prints) and waits until the page's level table and search table hold rows, with the run
   still going (live), then screenshots it. The report then opens offline (file://) with the
   Graph500 block, one plot per search and Dask's performance report, whose task stream
   names the validation's ``validate-chunk-*`` tasks.
2. the ``--scheduler`` line joins a LocalCluster this test starts (its address substituted
   for README's), so the single-process backend's levels reach the page from the client;
   the ``curl`` line (the test's dashboard address substituted) lists the dbfs metrics,
   checked for plausible values against the run's own Graph500 output.

Without chromium, chromedriver or selenium the tests skip, unless DBFS_REQUIRE_BROWSER=1
(set by .ci/run, which installs them), where that is a failure. DBFS_SCREENSHOTS=DIR also
saves the screenshots there (docs/dashboard.png and docs/report.png come from this test).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or \
    "/usr/bin/chromedriver"


def _readme_commands() -> list:
    text = (REPO / "README.md").read_text()
    sec = text.split("\n## Monitoring\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", sec, re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def _browser():
    missing = [p for p in (CHROMIUM, DRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        if os.environ.get("DBFS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DBFS_REQUIRE_BROWSER=1 but {', '.join(missing)} missing")
        pytest.skip(f"no headless browser here ({', '.join(missing)}): apt-get install chromium chromium-driver")
    os.environ["SE_OFFLINE"] = "true"          # Selenium Manager never downloads a browser or driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


@pytest.fixture(scope="module")
def browser():
    d = _browser()
    yield d
    d.quit()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("monitor")


def _save(driver, name, tmp):
    driver.save_screenshot(str(tmp / name))
    if os.environ.get("DBFS_SCREENSHOTS"):
        shutil.copy(tmp / name, Path(os.environ["DBFS_SCREENSHOTS"]) / name)


_PAGE_JS = """const d = window.Bokeh && Bokeh.documents.length ? Bokeh.documents[0] : null;
if (!d) return null;
const rows = (n) => (d.get_model_by_name(n).text.match(/<tr class='row'>/g) || []).length;
return {levels: rows('dbfs-levels'), searches: rows('dbfs-searches'), workers: rows('dbfs-workers'),
        header: d.get_model_by_name('dbfs-header').text};"""


def _env():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_live_page_and_report(browser, workdir):
    cmd = _readme_commands()[0]
    assert cmd.startswith("dbfs run --scale 14 --roots 8") and "--report run.html" in cmd
    p = subprocess.Popen(shlex.split(cmd), cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    err, link = [], threading.Event()
    reader = threading.Thread(target=lambda: [err.append(ln) or link.set() for ln in p.stderr], daemon=True)
    reader.start()
    try:
        url, deadline = None, time.time() + 120
        while url is None and time.time() < deadline and p.poll() is None:
            m = next((re.search(r"dashboard: (http://\S+)/status", ln) for ln in err if "dashboard:" in ln), None)
            url = m.group(1) + "/dbfs" if m else None
            time.sleep(0.1)
        assert url, "no dashboard link on stderr:\n" + "".join(err)
        browser.get(url)
        seen, live = None, False
        while time.time() < deadline and p.poll() is None:
            seen = browser.execute_script(_PAGE_JS)
            if seen and seen["levels"] > 0 and seen["searches"] >= 2 and seen["workers"] == 2:
                live = p.poll() is None
                time.sleep(0.6)            # one more redraw of the canvas before the picture
                _save(browser, "dashboard.png", workdir)
                break
            time.sleep(0.2)
        assert live, f"the page never showed levels and searches while the run went on: last {seen}"
        assert "search" in seen["header"] or "validate" in seen["header"]
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    reader.join(5)
    assert p.returncode == 0, "".join(err)[-3000:]
    assert "harmonic_mean_TEPS" in out

    from selenium.webdriver.common.by import By

    report = workdir / "run.html"
    html = report.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=['\"]https?:", html), "the report loads from the web"
    browser.get(report.as_uri())
    block = browser.find_element(By.ID, "graph500").text
    assert "SCALE:" in block and re.search(r"SCALE:\s+14\b", block) and "harmonic_mean_TEPS" in block
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.search-plot svg polyline")) == 8 * 2
    perf = browser.find_element(By.ID, "dask-performance-report").get_attribute("srcdoc")
    assert "validate-chunk" in perf
    browser.set_window_size(1200, 2300)     # the block, the overview plot and the search plots in one picture
    _save(browser, "report.png", workdir)
    browser.set_window_size(1200, 1000)


def _metrics(text) -> dict:
    out = {}
    for ln in text.splitlines():
        m = re.match(r"(dbfs_\w+(?:\{[^}]*\})?) (\S+)$", ln)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_joined_cluster_page_and_metrics(workdir):
    """README's monitoring lines 2-4 as written (free ports in place of 8786/8787, which may be taken here):
    `dbfs cluster local` on fixed ports, a run joining it, its metrics read with curl."""
    from test_profiles_checked import _cluster, _free_port, _stop

    pytest.importorskip("prometheus_client")
    _, up, join, curl = _readme_commands()
    sched, dash = _free_port(), _free_port()
    args = shlex.split(up.rstrip(" &").replace("8786", str(sched)).replace("8787", str(dash)))
    assert args[:2] == ["dbfs", "cluster"] and up.endswith("&"), up
    p, lines = _cluster(*args[2:])
    try:
        assert any(f"tcp://127.0.0.1:{sched}" in ln for ln in lines), "".join(lines)
        join = join.replace("tcp://127.0.0.1:8786", f"tcp://127.0.0.1:{sched}")
        r = subprocess.run(shlex.split(join), cwd=workdir, env=_env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        c = subprocess.run(["bash", "-c", curl.replace("http://127.0.0.1:8787", f"http://127.0.0.1:{dash}")],
                           capture_output=True, text=True, timeout=60)
    finally:
        _stop(p)
    assert c.returncode == 0, c.stderr
    m = _metrics(c.stdout)
    hm = float(re.search(r"harmonic_mean_TEPS:\s+!?\s*(\S+)", r.stdout).group(1))
    assert m["dbfs_runs_total"] == 1 and m["dbfs_searches_total"] == 8 and m["dbfs_run_searches"] == 8
    assert m["dbfs_hmean_gteps"] * 1e9 == pytest.approx(hm, rel=1e-4)       # the run's own Graph500 figure
    assert 0 < m["dbfs_last_gteps"] < 100
    assert m["dbfs_levels_total"] >= 8 * 3 and 0 < m["dbfs_level_seconds_total"] < 60
    assert m["dbfs_validation_failures_total"] == 0 and m["dbfs_rejected_events_total"] == 0
    assert m['dbfs_stage{stage="done"}'] == 1
