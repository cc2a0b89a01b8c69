"""What a person sees, in a real browser (Debian chromium + chromedriver, driven by selenium): the smoke run's
reports/index.html (headline table, every figure loaded with a non-zero size, no broken link) and the MLflow
UI's compare view of a paper's method and baseline runs (the claim's metric shown for both). Screenshots go to
reports/screenshots/ of the test run's workspace. Chromium is installed with apt when missing (root or sudo,
as in CI); without it the tests skip and say why."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from paperflow.registry import get_paper

PAPER = "fairgrad"  # its headline metric is derived (Delta-m%); the compare view shows the per-task accuracies it comes from


def _install_chromium() -> str | None:
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return None
    if os.geteuid() != 0 and shutil.which("sudo") is None:
        return "no chromium/chromedriver and no root/sudo to install them"
    prefix = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(prefix + ["apt-get", "update", "-qq"], capture_output=True, timeout=600, env=env)
    proc = subprocess.run(prefix + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", "chromium-driver",
                                    "fonts-liberation"], capture_output=True, text=True, timeout=900, env=env)
    return None if proc.returncode == 0 else f"apt-get install chromium failed: {proc.stderr[-1000:]}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = _install_chromium()
    if why:
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh profile: a stale one stops chromium starting
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--user-data-dir={profile}",
                "--window-size=1600,1200"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _rendered_lines(browser) -> set[str]:
    """Every line of text the page renders, scrolling each scrollable container: MLflow's compare tables are
    virtualised (a metric far down the list is not in the DOM until scrolled to)."""
    seen = set(browser.find_element("tag name", "body").text.splitlines())
    scrollers = browser.execute_script(
        "return Array.from(document.querySelectorAll('*')).filter(e => e.scrollHeight > e.clientHeight + 20 && "
        "getComputedStyle(e).overflowY !== 'visible');")
    for el in scrollers:
        height = browser.execute_script("return arguments[0].scrollHeight", el)
        for y in range(0, height + 400, 300):
            browser.execute_script("arguments[0].scrollTop = arguments[1]", el, y)
            time.sleep(0.15)
            seen.update(browser.find_element("tag name", "body").text.splitlines())
    return seen


def test_report_page_in_a_browser(browser, workspace, smoke_run):
    reports = workspace / "reports"
    browser.get((reports / "index.html").as_uri())
    time.sleep(1.0)
    body = browser.find_element("tag name", "body").text
    assert "Headline claims" in body
    table_rows = browser.execute_script(
        "const h = document.getElementById('headlines'); let t = h; while (t && t.tagName !== 'TABLE') t = t.nextElementSibling;"
        "return t ? t.querySelectorAll('tbody tr, tr').length : 0;")
    assert table_rows > 1, "the headline table is empty"
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth, i.naturalHeight]);")
    assert images, "no figure on the page"
    broken = [src for src, done, w, h in images if not (done and w > 0 and h > 0)]
    assert not broken, f"figures that did not load: {broken[:10]}"
    links = browser.execute_script("return Array.from(document.links).map(a => a.getAttribute('href'));")
    ids = set(browser.execute_script("return Array.from(document.querySelectorAll('[id]')).map(e => e.id);"))
    dead = []
    for href in links:
        if href.startswith("#"):
            if href[1:] not in ids:
                dead.append(href)
        elif not href.startswith(("http://", "https://", "mailto:")):
            if not (reports / urllib.parse.unquote(href.split("#")[0])).exists():
                dead.append(href)
    assert not dead, f"broken links: {dead[:10]}"
    shots = reports / "screenshots"
    shots.mkdir(exist_ok=True)
    browser.save_screenshot(str(shots / "report_index.png"))
    assert (shots / "report_index.png").stat().st_size > 10_000


def test_mlflow_compare_view_shows_the_claim_metric(browser, workspace, smoke_run):
    from mlflow.tracking import MlflowClient

    from paperflow import tracking, tracking_server

    spec = get_paper(PAPER)
    head = next(c for c in spec.comparisons(spec.Config()) if c.role == "headline")
    method, baseline = head.method, next(v for v in spec.variants if v not in (head.method,) and "|" not in v)
    uri = tracking_server.start(workspace, tracking.default_uri(workspace))  # the UI is the tracking server
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(PAPER)
        runs = client.search_runs([exp.experiment_id], filter_string="tags.stage = 'run' and tags.current = 'true'", max_results=100)
        picked = {r.data.tags["variant"]: r for r in runs if r.data.tags.get("seed") == "0"}
        ids = [picked[method].info.run_id, picked[baseline].info.run_id]
        metric = "dense/acc_a"  # a metric both runs carry (the headline Delta-m% is derived from it in collect)
        assert all(metric in picked[v].data.metrics for v in (method, baseline))
        query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([exp.experiment_id])})
        browser.get(f"{uri}/#/compare-runs?{query}")
        deadline = time.time() + 90
        text = ""
        while time.time() < deadline and "Comparing 2 Runs" not in text:
            time.sleep(1.0)
            text = browser.find_element("tag name", "body").text
        assert "Comparing 2 Runs" in text, text[:2000]
        assert metric in _rendered_lines(browser), f"{metric} not on the compare page"
        for v in (method, baseline):
            assert f"{PAPER}__{v}__seed0" in text, v  # both runs' names in the header
        browser.execute_script("document.querySelectorAll('*').forEach(e => { e.scrollTop = 0; });")  # the header
        time.sleep(0.5)
        shots = workspace / "reports" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(shots / f"mlflow_compare_{PAPER}.png"))
        assert (shots / f"mlflow_compare_{PAPER}.png").stat().st_size > 10_000
    finally:
        tracking_server.stop(workspace)


def test_mlflow_experiment_opens_in_the_model_training_runs_table(browser, workspace, smoke_run):
    """MLflow 3's UI opens experiments in its GenAI view unless the URL carries workflowType=machine_learning (its
    default context is GenAI; the experiment's kind tag is read only when that selector is off). The README's links
    carry it: the paper's runs are listed by name (issue 26)."""
    from mlflow.tracking import MlflowClient

    from paperflow import tracking, tracking_server

    uri = tracking_server.start(workspace, tracking.default_uri(workspace))
    try:
        exp = MlflowClient(tracking_uri=uri).get_experiment_by_name(PAPER)
        browser.get(tracking.ui_url(uri, exp.experiment_id))
        deadline, text = time.time() + 90, ""
        while time.time() < deadline and f"{PAPER}__" not in text:
            time.sleep(1.0)
            text = browser.find_element("tag name", "body").text
        assert f"{PAPER}__" in text, text[:2000]  # run names of the runs table
        shots = workspace / "reports" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(shots / f"mlflow_runs_{PAPER}.png"))
    finally:
        tracking_server.stop(workspace)
