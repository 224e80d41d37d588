"""End to end in a real browser: ``streamlit run app.py`` on a temp store, every page opened in headless
Debian Chromium (Playwright), a log uploaded through the file input, a scheduler slider moved, a live run
refreshing itself. Screenshots (1280x800) go to tests/artifacts/ for a person to look at.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingest.services.demo import DEMO_SEEDED_KEY
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from ingest.store.shards import ShardWriter
from tests.conftest import REPO_ROOT, SMALL_RUN, RunSpec, write_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
VIEWPORT = {"width": 1280, "height": 800}
LIVE_RUN = "live-run"
# url path -> text the page must show
PAGES = {
    "": "Runs",
    "runs": "Runs",  # typed, or from an old bookmark: the default page's own name
    "upload": "Upload logs",
    "overview": "Run overview",
    "compare": "Compare runs",
    "ranks": "Outlier ranks",
    "spikes": "Incidents",
    "tree": "Decision tree",
    "scheduler": "Largest per-step LR change",
    "cost": "Cost of rollback",
    "checklist": "",
    "scenarios": "clipping vs warmup restarts",  # the thesis section (shown with or without the scenario runs)
}
JSONL = b'{"step": 1, "loss": 2.5, "lr": 0.001}\n{"step": 2, "loss": 2.25, "lr": 0.002}\n{"step": 3, "loss": 2.0}\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"streamlit did not come up in {timeout_s} s:\n{log.read_text()[-3000:]}")


def _grow(store: Store, name: str, first: int, last: int) -> None:
    """Append steps [first, last] of run-level loss to ``name`` the way ``watch`` folds shards in."""
    steps = np.arange(first, last + 1)
    with tempfile.TemporaryDirectory() as shard_dir:
        with ShardWriter(shard_dir, 0) as writer:
            writer.write_columns(steps, {"loss": 2.0 + 0.1 * np.cos(steps / 50.0)}, rank=-1)
        store.compact(name, shard_dir, status="live")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store]]:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    root = tmp_path_factory.mktemp("e2e")
    store = write_run(open_analysed_store(root / "store"), RunSpec())
    for i in range(3):
        write_run(store, RunSpec(name=f"gpt-seed{i}", seed=20 + i, per_rank=False, loss_floor=2 + 0.05 * i))
    _grow(store, LIVE_RUN, 0, 499)
    store.set_setting(DEMO_SEEDED_KEY, "1")  # the demo runs are the demo's business, not this test's
    port = _free_port()
    log = root / "streamlit.log"
    env = {**os.environ, "STABSCOPE_STORE": str(store.root)}
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
               "--server.headless", "true", "--browser.gatherUsageStats", "false"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url, store
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _settle(page: Any, timeout_ms: int = 45_000) -> None:
    """Wait until the script run is over and every table and chart has drawn."""
    page.wait_for_timeout(500)
    page.wait_for_selector(
        "[data-testid='stApp'][data-test-connection-state='CONNECTED'][data-test-script-state='notRunning']",
        timeout=timeout_ms,
    )
    # tables draw on a canvas after the run: wait until every one outside a closed expander has
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')]"
        ".every(e => e.closest('details:not([open])') || e.querySelector('canvas'))",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(1500)


def _check_page(page: Any, name: str) -> None:
    """No exception box, nothing wider than the 1280-px window; screenshot for a person to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name or 'runs'}.png"))
    exceptions = page.locator("[data-testid='stException']")
    assert exceptions.count() == 0, exceptions.first.inner_text()
    overflow = page.evaluate(
        "(sel) => [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect())"
        ".filter(r => r.width > 0 && r.right > window.innerWidth + 1).length",
        "[data-testid='stMain'] .stPlotlyChart, [data-testid='stMain'] [data-testid='stDataFrame'], "
        "[data-testid='stMain'] [data-testid='stMarkdown'], [data-testid='stMain'] [data-testid='stMetric']",
    )
    assert overflow == 0, f"{name}: {overflow} elements cut off at the right edge"
    # the warm-up elements (pages.parts.warmup) load chart and table code early and are never seen
    warmups = page.evaluate(
        "() => [...document.querySelectorAll('.st-key-chunk_warmup')].map(e => e.getBoundingClientRect().right)"
    )
    assert all(right < 0 for right in warmups), f"{name}: a warm-up element is on screen at {warmups}"


def test_every_page_opens_without_an_error(app: tuple[str, Store], browser: Any) -> None:
    url, _ = app
    page = browser.new_page(viewport=VIEWPORT)
    for path, text in PAGES.items():
        page.goto(f"{url}/{path}")
        _settle(page)
        _check_page(page, path)
        assert page.get_by_text("Page not found").count() == 0, f"/{path} is not a page"
        if text:
            assert page.get_by_text(text).first.is_visible(), f"/{path} does not show {text!r}"
        if path in ("", "overview"):  # Runs (a table) and the overview (a chart) warm up their code early
            warm = "[data-testid='stDataFrame']" if path == "" else ".stPlotlyChart"
            assert page.locator(f".st-key-chunk_warmup {warm}").count() == 1, path
    page.close()


def test_upload_a_log_through_the_file_input(app: tuple[str, Store], browser: Any) -> None:
    url, store = app
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{url}/upload")
    _settle(page)
    page.locator("[data-testid='stFileUploader'] input[type='file']").first.set_input_files(
        [{"name": "browser run.jsonl", "mimeType": "application/json", "buffer": JSONL}]
    )
    page.get_by_text("Preview").wait_for(timeout=30_000)
    _settle(page)
    assert page.get_by_text("jsonl").first.is_visible()
    _check_page(page, "upload-preview")
    page.get_by_role("button", name="Import as run browser_run").click()
    page.get_by_text("Imported 5 rows into run").wait_for(timeout=30_000)
    _check_page(page, "upload-imported")
    np.testing.assert_allclose(store.read_series("browser_run", "loss").values, [2.5, 2.25, 2.0])
    page.close()


def test_a_page_error_is_one_banner_in_the_running_app(app: tuple[str, Store], browser: Any) -> None:
    """A config that cannot be read ends the Checklist page with app.py's one banner (pages.parts.page_errors):
    the file and line, no exception box, no traceback."""
    url, _ = app
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{url}/checklist")
    _settle(page)
    page.locator("[data-testid='stFileUploader'] input[type='file']").first.set_input_files(
        [{"name": "broken.yaml", "mimeType": "text/yaml", "buffer": b"a: [1, 2\nb: 3\n"}]
    )
    banner = page.locator("[data-testid='stAlertContentError']")
    banner.first.wait_for(timeout=30_000)
    _settle(page)
    assert banner.count() == 1 and "broken.yaml, line 2: invalid YAML" in banner.first.inner_text()
    _check_page(page, "checklist-error")
    assert "Traceback" not in page.content()
    page.close()


def test_scheduler_slider_updates_the_warnings(app: tuple[str, Store], browser: Any) -> None:
    url, _ = app
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{url}/scheduler")
    _settle(page)
    assert page.get_by_text("No known pitfall").is_visible()
    thumb = page.locator("[data-testid='stSlider']").filter(has_text="num_cycles").get_by_role("slider")
    thumb.focus()
    for _ in range(3):
        thumb.press("ArrowRight")
    _settle(page)
    page.get_by_text("num_cycles = 6 > 5").wait_for(timeout=15_000)
    _check_page(page, "scheduler-6-cycles")
    page.close()


def test_a_live_run_refreshes_itself(app: tuple[str, Store], browser: Any) -> None:
    url, store = app
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)  # the entry page first: it registers the app's navigation
    _settle(page)
    page.goto(f"{url}/overview?run={LIVE_RUN}")
    _settle(page)
    page.get_by_text("Steps 0–499").wait_for(timeout=15_000)
    _grow(store, LIVE_RUN, 500, 899)  # the way `stabscope watch` folds new shards in
    page.get_by_text("Steps 0–899").wait_for(timeout=20_000)  # no reload: the fragment re-reads the run
    _check_page(page, "overview-live")
    page.close()


def test_a_drag_rereads_the_range_and_a_heatmap_click_picks_a_rank(app: tuple[str, Store], browser: Any) -> None:
    url, _ = app
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.goto(url)  # the entry page first: it registers the app's navigation
    _settle(page)
    page.goto(f"{url}/overview?run={SMALL_RUN}")
    _settle(page)
    chart = page.locator(".st-key-ov_chart")
    box = chart.bounding_box()
    x, y = box["x"] + box["width"] * 0.45, box["y"] + 120
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 90, y + 60, steps=8)
    page.mouse.up()
    _settle(page)
    caption = page.get_by_text(re.compile(r"^Steps [\d,]+–[\d,]+: ")).first.inner_text()
    first, last = (int(v.replace(",", "")) for v in re.findall(r"[\d,]+", caption)[:2])
    assert 0 < first < last < 1999, caption  # a plain drag (no tool picked) selected the span...
    assert "every step (full fidelity)" in caption  # ...and it was re-read from the store
    # No stale box over the new span that a user can see. Streamlit sometimes leaves the previous
    # run's chart in the page for a while, hidden at zero width, with the drag's box in it (seen on
    # a slow machine); that one does not count.
    visible_boxes = page.evaluate(
        "() => [...document.querySelectorAll('.stPlotlyChart .selectionlayer path')]"
        ".filter(p => p.closest('.stPlotlyChart').getBoundingClientRect().width > 0).length"
    )
    assert visible_boxes == 0
    _check_page(page, "overview-drag-zoom")

    page.goto(f"{url}/ranks?run={SMALL_RUN}")
    _settle(page)
    assert page.get_by_text(re.compile(r"^Rank 2: ")).is_visible()  # the outlier rank is picked first
    heat = page.locator(".st-key-rk_heat").bounding_box()
    page.mouse.click(heat["x"] + heat["width"] * 0.4, heat["y"] + 45)  # the top row: rank 0
    _settle(page)
    page.get_by_text(re.compile(r"^Rank 0: ")).wait_for(timeout=15_000)
    page.close()


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    """Whether two bounding boxes (x, y, width, height) share any pixel."""
    apart_x = a["x"] >= b["x"] + b["width"] or b["x"] >= a["x"] + a["width"]
    apart_y = a["y"] >= b["y"] + b["height"] or b["y"] >= a["y"] + a["height"]
    return not (apart_x or apart_y)


def test_an_overview_link_reopens_its_zoom_and_the_modebar_clears_the_titles(
    app: tuple[str, Store], browser: Any
) -> None:
    url, store = app
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.goto(url)  # the entry page first: it registers the app's navigation
    _settle(page)
    page.goto(f"{url}/overview?run={SMALL_RUN}&steps=1100-1300")
    _settle(page)
    page.get_by_text("Steps 1,100–1,300").first.wait_for(timeout=15_000)  # the link's zoom, not the whole run
    assert "steps=1100-1300" in page.url and f"run={SMALL_RUN}" in page.url
    chart = page.locator(".st-key-ov_chart")
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 150)  # the modebar shows on hover
    page.wait_for_timeout(800)
    modebar = chart.locator(".modebar").first.bounding_box()
    titles = [t.bounding_box() for t in chart.locator(".annotation-text").all()]
    assert modebar is not None and titles
    overlaps = [t for t in titles if t and _overlap(t, modebar)]
    assert not overlaps, f"the modebar {modebar} covers titles {overlaps}"
    # every detected incident in the span has its marker drawn (one diamond or edge triangle per metric)
    incidents = [s for s in store.spikes(SMALL_RUN) if 1100 <= int(s["peak"]) <= 1300]
    assert incidents and chart.locator(".scatterlayer .point").count() >= len(incidents)
    _check_page(page, "overview-link-zoom")
    page.close()
