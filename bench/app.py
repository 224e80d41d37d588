"""Goal 6: the app. Time from ``streamlit run app.py`` and from ``stabscope serve`` to the first rendered
overview chart in headless Chromium (Debian's ``/usr/bin/chromium`` through Playwright) on the demo
store, and from the server's first healthy answer to the first screen (the Runs table drawn).

The targets are differences to the floor of the machine at hand, measured in the same run the same
way (issue 22): ``streamlit run`` of a bare page that draws one two-point Plotly chart or one two-row
table (``bench/floor_app.py``). The first render may take at most ``FIRST_RENDER_MARGIN_S`` more than
the chart's floor, for either command; the first screen at most ``FIRST_SCREEN_MARGIN_S`` more than
the table's. What a machine pays for any Streamlit dashboard (the server's start, Streamlit's bundle,
Plotly's code) is in the floor, so the target judges StabScope's own part on any machine; the absolute
times stay in the table as information.

Each rerun of the overview page on the full-size runs is measured on the server with Streamlit's
``AppTest`` (the same script, session state and ``st.cache_data`` as a browser session; the browser's
drawing is not in it), as information: no bare page has reruns to compare with.

The browser is started before the clock; each repeat starts a fresh Streamlit process and a fresh
browser context (no HTTP cache). The demo store is seeded once, before any timing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import REPO, Figure, Sizes, Unavailable, log, median, run_child, speedup, wait_with_rusage
from bench.compaction import RUN, ensure_store
from bench.data import DONE_MARKER, FRAME_STEPS, _fresh, _run_level_columns, grad_norm_curve

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CHART = ".st-key-ov_chart .js-plotly-plot .main-svg"  # the overview's chart, not the off-screen warm-up
FLOOR_APP = "bench/floor_app.py"
"""Goal 6's baselines: a bare Streamlit page with one two-point Plotly chart, or (``?element=table``) one
two-row table: the floor of the machine at hand."""
FLOOR_CHART = ".st-key-floor_chart .js-plotly-plot .main-svg"
FLOOR_TABLE = ".st-key-floor_table canvas"
RUNS_TABLE = ".st-key-runs_table canvas"
"""The Runs page's catalog table, drawn: issue 6's first screen."""
BENCH_TOKEN = "bench-token-for-goal-6-not-a-secret"
"""The access token ``stabscope serve`` is started with here (``$STABSCOPE_TOKEN``), given in the page's
address as the URL serve prints does. ``streamlit run app.py`` runs without one, as a development
server does by default."""
FIRST_RENDER_MARGIN_S = 1.0
"""Most seconds a first rendered overview may take beyond the bare chart page's (issue 22's goal 6)."""
FIRST_SCREEN_MARGIN_S = 0.5
"""Most seconds the first screen may take beyond the bare table page's (issue 22's goal 6)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_store(workdir: Path) -> Path:
    """The embedded default's demo runs, written once through the real shard -> compact path."""
    from ingest.services.demo import DEMO_SEEDED_KEY, seed_demo_store
    from ingest.services.run_analyses import open_analysed_store

    path = workdir / "store-demo"
    store = open_analysed_store(path)
    if not store.get_setting(DEMO_SEEDED_KEY):
        seed_demo_store(store)
    return path


def write_wide_run(shards: str, ranks: int, steps: int, rank_every: int) -> dict[str, Any]:
    """Issue 6's big run as per-rank shards: the run-level series (loss, grad norm, LR, clip) every step,
    each rank's local grad norm and step time every ``rank_every`` steps, as large jobs log per-rank
    telemetry less often than the loss. Returns the record count."""
    import numpy as np

    from ingest.store.shards import ShardWriter

    all_steps = np.arange(steps, dtype=np.int64)
    rank_steps = all_steps[::rank_every]
    records = 0
    for rank in range(ranks):
        rng = np.random.default_rng(rank)
        local = grad_norm_curve(rank_steps, rng) * np.sqrt(ranks)  # one rank's batch is noisier
        step_time = np.round(0.8 + 0.01 * np.abs(rng.standard_normal(rank_steps.size)), 4)
        with ShardWriter(Path(shards), rank) as writer:
            if rank == 0:
                writer.write_meta({"world_size": ranks, "per_rank_batch_size": 8, "generator": "bench.app"})
                run_level = _run_level_columns(all_steps)
                for a in range(0, steps, FRAME_STEPS):
                    b = min(a + FRAME_STEPS, steps)
                    writer.write_columns(all_steps[a:b], {m: v[a:b] for m, v in run_level.items()}, rank=-1)
                records += steps * len(run_level)
            for a in range(0, rank_steps.size, FRAME_STEPS):
                b = min(a + FRAME_STEPS, rank_steps.size)
                writer.write_columns(rank_steps[a:b], {"grad_norm_local": local[a:b], "step_time_s": step_time[a:b]})
            records += 2 * rank_steps.size
    return {"records": records}


def wide_store(workdir: Path, sizes: Sizes) -> tuple[Path, int]:
    """The compacted wide run (generated and compacted once, in children); its record count."""
    store = workdir / f"store-wide-{sizes.wide_ranks}x{sizes.wide_steps}"
    marker = store / DONE_MARKER
    if not marker.exists():
        shards = _fresh(workdir / f"run-wide-{sizes.wide_ranks}x{sizes.wide_steps}")
        log(f"goal 6: writing the {sizes.wide_ranks} x {sizes.wide_steps:,} run")
        args = {"shards": str(shards), "ranks": sizes.wide_ranks, "steps": sizes.wide_steps}
        written = run_child("bench.app:write_wide_run", {**args, "rank_every": sizes.wide_rank_every})
        _fresh(store)
        log("goal 6: compacting it")
        run_child("bench.compaction:compact_shards", {"shards": str(shards), "store": str(store)})
        marker.write_text(f"{written.result['records']}\n")
    return store, int(marker.read_text())


# ------------------------------------------------------------------------------- child targets


def first_render(
    store: str,
    repeats: int,
    run: str | None,
    timeout_s: float,
    *,
    serve: bool = False,
    path: str = "overview",
    selector: str = CHART,
    script: str = "app.py",
) -> dict[str, Any]:
    """Seconds from ``streamlit run script`` (or ``stabscope serve``, the README's command, when
    ``serve``) to ``selector`` visible at ``/<path>`` (the overview's chart by default), per repeat
    (``samples``); the same from the server's first healthy answer (``after_up``); and the server's
    peak RSS. A ``script`` other than app.py (the floor) is not checked for app.py's navigation."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise Unavailable(f"playwright is not installed ({exc})") from exc
    if not Path(CHROMIUM).exists():
        raise Unavailable(f"{CHROMIUM} is missing")
    samples, after_up, rss = [], [], []
    env = {**os.environ, "STABSCOPE_STORE": store}
    env.pop("STABSCOPE_TOKEN", None)
    if serve:
        env["STABSCOPE_TOKEN"] = BENCH_TOKEN
    if run is not None:
        env["STABSCOPE_NO_DEMO"] = "1"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for _ in range(repeats):
            port = _free_port()
            query = [f"run={run}"] if run else []
            if serve:  # serve gates every page behind a token (made at each start unless given): sign in as its URL
                query.append(f"token={BENCH_TOKEN}")
            url = f"http://127.0.0.1:{port}/{path}" + (f"?{'&'.join(query)}" if query else "")
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            cmd = [sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true"]
            cmd += ["--server.port", str(port), "--browser.gatherUsageStats", "false"]
            if serve:  # the demo store is already seeded: --no-demo only skips the check
                cmd = [sys.executable, "-m", "ingest", "serve", "--store", store, "--port", str(port), "--no-demo"]
            start = time.perf_counter()
            server = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                up = _wait_healthy(f"http://127.0.0.1:{port}", server, start + timeout_s)
                page.goto(url, wait_until="commit", timeout=timeout_s * 1000)
                page.wait_for_selector(selector, state="visible", timeout=timeout_s * 1000)
                done = time.perf_counter()
                samples.append(done - start)
                after_up.append(done - up)
                if script == "app.py" and not page.get_by_text("Decision tree").count():
                    raise RuntimeError(f"/{path} ran outside app.py's navigation (Streamlit's old pages/ mode)")
            finally:
                context.close()
                server.terminate()
                rss.append(wait_with_rusage(server, 30, "streamlit")[1])
        browser.close()
    return {"samples": samples, "after_up": after_up, "server_rss_mb": rss}


def _wait_healthy(url: str, server: subprocess.Popen[bytes], deadline: float) -> float:
    """``perf_counter`` time of the server's first healthy answer (polled every 20 ms)."""
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.perf_counter()
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode} before it was up") from None
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.02)


def overview_reruns(store: str, run: str, repeats: int) -> dict[str, Any]:
    """Seconds of each rerun of the overview page script (AppTest), after the first run."""
    os.environ["STABSCOPE_STORE"] = store
    os.environ["STABSCOPE_NO_DEMO"] = "1"
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "pages" / "overview.py"), default_timeout=600)
    at.session_state["selected_run"] = run
    start = time.perf_counter()
    at.run()
    first = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(f"the overview page failed: {at.exception[0].message}")
    charts = len(at.get("plotly_chart"))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        at.run()
        samples.append(time.perf_counter() - start)
    return {"first_s": first, "samples": samples, "charts": charts}


# ------------------------------------------------------------------------------- the goal


def within_floor(
    name: str,
    value_s: float,
    floor: str,
    floor_s: float,
    margin_s: float,
    **extra: Any,
) -> Figure:
    """A time judged against the floor measured in the same run: met when it takes at most ``margin_s``
    seconds more (the table shows the ratio and the difference)."""
    return Figure(
        "6",
        name,
        value_s,
        "s",
        floor,
        floor_s,
        speedup(value_s, floor_s),
        target=f"<= the floor + {margin_s:.1f} s",
        met=value_s - floor_s <= margin_s,
        difference=value_s - floor_s,
        **extra,
    )


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    log("goal 6: demo store")
    demo = demo_store(workdir)
    reps = sizes.repeats  # a Chromium and a server start each: the slowest repeats of the suite
    args: dict[str, Any] = {"store": str(demo), "repeats": reps, "run": None, "timeout_s": 120.0}
    floor_chart = {"path": "", "selector": FLOOR_CHART, "script": FLOOR_APP}
    log("goal 6: the floor: streamlit run -> a bare page's one Plotly chart")
    floor = run_child("bench.app:first_render", {**args, **floor_chart}).result
    floor_s = median(floor["samples"])
    log("goal 6: streamlit run -> first rendered overview")
    start = run_child("bench.app:first_render", args)
    log("goal 6: stabscope serve -> first rendered overview")
    served = run_child("bench.app:first_render", {**args, "serve": True})
    log("goal 6: the floor: streamlit run -> a bare page's one table")
    floor_table = {"path": "?element=table", "selector": FLOOR_TABLE, "script": FLOOR_APP}
    table_floor = median(run_child("bench.app:first_render", {**args, **floor_table}).result["after_up"])
    log("goal 6: stabscope serve -> first screen (the Runs table)")
    screen = run_child("bench.app:first_render", {**args, "serve": True, "path": "", "selector": RUNS_TABLE})
    chart_floor = "the floor: streamlit run -> a bare page's one two-point Plotly chart"
    first = median(start.result["samples"])
    figures = [
        within_floor(
            "streamlit run -> first rendered overview (demo store, headless Chromium)",
            first,
            chart_floor,
            floor_s,
            FIRST_RENDER_MARGIN_S,
            peak_rss_mb=median(start.result["server_rss_mb"]),
            repeats=reps,
            note=f"peak RSS is the Streamlit server's; {median(start.result['after_up']):.2f} s after it was up "
            f"(the floor: {median(floor['after_up']):.2f} s)",
            samples=start.result["samples"],
        ),
        within_floor(
            "stabscope serve (the README's command) -> first rendered overview (demo store)",
            median(served.result["samples"]),
            chart_floor,
            floor_s,
            FIRST_RENDER_MARGIN_S,
            peak_rss_mb=median(served.result["server_rss_mb"]),
            repeats=reps,
            note="the CLI execs the server (one process); the page libraries load in the first page's run; "
            f"{median(served.result['after_up']):.2f} s after it was up",
            samples=served.result["samples"],
        ),
        within_floor(
            "first screen (Runs table drawn) after the server is up, stabscope serve (demo store)",
            median(screen.result["after_up"]),
            "the floor: a bare page's one table, after streamlit run is up",
            table_floor,
            FIRST_SCREEN_MARGIN_S,
            repeats=reps,
            note=f"from the health check's first answer; {median(screen.result['samples']):.2f} s from the command",
            samples=screen.result["after_up"],
        ),
    ]
    store, inputs = ensure_store(workdir, sizes)
    label = f"{inputs.ranks} x {inputs.steps:,} run"
    figures.append(_rerun_figure(store, label, sizes))
    wide, wide_records = wide_store(workdir, sizes)
    label = f"{sizes.wide_ranks:,}-rank x {sizes.wide_steps:,}-step run"
    note = f"{wide_records:,} records; per-rank metrics every {sizes.wide_rank_every} steps (issue 6)"
    figures.append(_rerun_figure(wide, label, sizes, note))
    log("goal 6: first rendered overview of the full-size run")
    big = run_child("bench.app:first_render", {"store": str(store), "repeats": 1, "run": RUN, "timeout_s": 300.0})
    figures.append(
        Figure(
            "6",
            f"streamlit run -> first rendered overview of the {inputs.ranks} x {inputs.steps:,} run",
            median(big.result["samples"]),
            "s",
            peak_rss_mb=median(big.result["server_rss_mb"]),
            note="cold server caches; informative",
            samples=big.result["samples"],
        )
    )
    return figures


def _rerun_figure(store: Path, label: str, sizes: Sizes, note: str = "") -> Figure:
    """Goal 6's rerun figure, information without a target: medians of the overview page's reruns on
    ``store``'s run (AppTest), beside the page's first run."""
    log(f"goal 6: overview reruns on the {label}")
    repeats = max(sizes.repeats, 5)
    reruns = run_child("bench.app:overview_reruns", {"store": str(store), "run": RUN, "repeats": repeats})
    if not reruns.result["charts"]:
        raise RuntimeError(f"the overview page drew no chart of the {label}")
    return Figure(
        "6",
        f"overview rerun on the {label} (server side, AppTest)",
        median(reruns.result["samples"]),
        "s",
        "first run of the page (cold caches)",
        reruns.result["first_s"],
        peak_rss_mb=reruns.peak_rss_mb,
        repeats=repeats,
        note="; ".join(filter(None, [f"{reruns.result['charts']} chart(s)", note])),
        samples=reruns.result["samples"],
    )
