"""StabScope as a user installs it: the wheel built from this tree, installed with pip into a fresh
virtual environment (its dependencies from the package index, as a user's would come), and
``stabscope serve`` from that environment, started in a folder outside the source tree, renders the
Runs page of its demo runs and the Scenarios page's reference results in headless Chromium, with
every setting of .streamlit/config.toml applied.

The fresh environment cannot see this tree: no PYTHONPATH, no editable install, a working directory
elsewhere, and the test asserts that ``pages``, ``ingest`` and ``stab_core`` load from its own
site-packages. Building and installing take about a minute (pip resolves torch and the rest from the
local index); the source is copied first, so the build leaves nothing in the tree. Two quick tests
check the same flags from the source tree, without a build."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import pages.server
from ingest.services.demo import demo_run_names
from pages.navigation import page_scripts
from tests.conftest import REPO_ROOT
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, _free_port, _settle, _wait_healthy
from tests.test_serve import printed_token

REPO_CONFIG = REPO_ROOT / ".streamlit" / "config.toml"
NOT_BUILD_INPUTS = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".venv", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", "artifacts",
)  # fmt: skip
"""What the copied source leaves out: caches, earlier builds (a stale build/lib would end up in the
wheel) and the in-place compiled extension (the build must compile its own)."""


@dataclass(frozen=True)
class Installed:
    """The built wheel and the fresh environment it is installed in."""

    wheel: Path
    venv: Path
    outside: Path
    """A working directory outside the source tree, with its own HOME (no ~/.streamlit of the user's)."""
    build_s: float
    install_s: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self) -> dict[str, str]:
        """The environment of a command in the fresh install: none of the test's own Python settings."""
        drop = {"PYTHONPATH", "STABSCOPE_TOKEN", "STABSCOPE_STORE", "STABSCOPE_NO_DEMO", "VIRTUAL_ENV"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["PATH"] = f"{self.venv / 'bin'}:/usr/bin:/bin"
        env["HOME"] = str(self.outside / "home")
        return env

    def run(self, *args: str, timeout_s: float = 120) -> str:
        """stdout of ``args`` run in the fresh install from the outside folder; fails the test with its
        stderr when it exits non-zero."""
        done = subprocess.run(args, cwd=self.outside, env=self.env(), capture_output=True, text=True, timeout=timeout_s)
        assert done.returncode == 0, f"{args} exited with {done.returncode}:\n{done.stderr[-3000:]}"
        return done.stdout


def _run_checked(args: list[str], cwd: Path, what: str, timeout_s: float, env: dict[str, str] | None = None) -> float:
    """Run a build step; its wall time in seconds. Fails the test with the step's output on error."""
    start = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return time.monotonic() - start


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_BUILD_INPUTS)
    dist = root / "dist"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)]
    build_s = _run_checked(pip_wheel, root, "pip wheel", 600)
    wheels = list(dist.glob("stabscope-*.whl"))
    assert len(wheels) == 1, wheels
    venv = root / "venv"
    outside = root / "elsewhere"
    (outside / "home").mkdir(parents=True)
    # pip without this tree on PYTHONPATH: a stabscope.egg-info there (an editable install) reads as
    # stabscope already installed, and pip would skip the wheel
    pip_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    start = time.monotonic()
    _run_checked([sys.executable, "-m", "venv", str(venv)], root, "python -m venv", 300)
    # --no-compile: pip byte-compiles every installed module by default (torch's and pyarrow's thousands),
    # which took 60 % of the install's CPU time (63 -> 23 s user+sys); Python compiles the modules a
    # command imports as it imports them, so the server and the commands below run the same code
    pip_install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheels[0])]
    _run_checked(pip_install, outside, "pip install of the wheel", 900, pip_env)
    install = Installed(wheels[0], venv, outside, build_s, time.monotonic() - start)
    print(f"wheel built in {install.build_s:.0f} s, fresh venv + install in {install.install_s:.0f} s")
    return install


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A TOML table's options by dotted name, as Streamlit names them (``theme.light.primaryColor``)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.slow
@pytest.mark.system
def test_the_wheel_holds_the_app_its_config_and_data_and_no_bench(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        packaged_config = wheel.read("pages/_streamlit/config.toml")
    assert {name.split("/")[0] for name in names} == {"ingest", "pages", "stab_core", "stabscope-0.1.0.dist-info"}
    assert {"pages/navigation.py", "pages/server.py", "ingest/training/reference_results.json"} <= names
    assert {f"pages/{script}.py" for script in page_scripts()} <= names
    assert packaged_config == REPO_CONFIG.read_bytes()
    if shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0]):
        assert any(n.startswith("ingest/formats/_fields.") and n.endswith(".so") for n in names), "no C extension"


@pytest.mark.slow
@pytest.mark.system
def test_the_installed_package_loads_from_its_own_environment(installed: Installed) -> None:
    code = (
        "import json, ingest, pages, stab_core, ingest.formats._fields\n"
        "from ingest.training.experiment_results import DOCS_RESULTS\n"
        "from pages.server import APP, streamlit_config_file\n"
        "print(json.dumps({'modules': [m.__file__ for m in (ingest, pages, stab_core, ingest.formats._fields)],\n"
        "    'app': str(APP), 'config': str(streamlit_config_file()), 'results': str(DOCS_RESULTS),\n"
        "    'results_exist': DOCS_RESULTS.is_file()}))\n"
    )
    where = json.loads(installed.run(str(installed.python), "-c", code))
    site_packages = str(installed.venv / "lib")
    for path in [*where["modules"], where["app"], where["config"], where["results"]]:
        assert path.startswith(site_packages) and not path.startswith(str(REPO_ROOT)), path
    assert where["results_exist"]


EFFECTIVE_OPTIONS = (
    "import json, sys\nfrom streamlit import config\nfrom streamlit.web import bootstrap, cli\n"
    "from pages.server import APP, serve_options, streamlit_config_file, streamlit_flags\n"
    "config_file = streamlit_config_file()\n"
    "options = serve_options(8501, '127.0.0.1', exposed=False, has_token=False, config_file=config_file)\n"
    "parsed = cli.main_run.make_context('run', [str(APP), *streamlit_flags(options)]).params\n"
    "bootstrap.load_config_options({k: v for k, v in parsed.items() if k not in ('target', 'args')})\n"
    "print(json.dumps({name: config.get_option(name) for name in json.loads(sys.argv[1])}))\n"
)
"""Prints the options named in argv[1] as Streamlit resolves them from the flags ``stabscope serve``
builds: parsed by Streamlit's own ``run`` command, then its config module (config files included)."""


def _check_effective_options(effective: dict[str, Any], expected: dict[str, Any]) -> None:
    assert effective == expected
    # the ones issue #30 names, in case the repository's file loses one
    assert effective["client.showErrorDetails"] == "none" and effective["server.fileWatcherType"] == "none"
    assert effective["server.address"] == "127.0.0.1" and effective["server.maxUploadSize"] == 200
    assert effective["theme.light.primaryColor"] == "#d9480f" and effective["theme.dark.primaryColor"] == "#ff6b2c"


def test_serve_flags_give_streamlit_every_setting_of_the_config(tmp_path: Path) -> None:
    """From the source tree, in a folder without a .streamlit/ (and a HOME without one)."""
    expected = _flat(tomllib.loads(REPO_CONFIG.read_text()))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", EFFECTIVE_OPTIONS, json.dumps(list(expected))],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _check_effective_options(json.loads(done.stdout), expected)


def test_a_missing_config_is_one_message_naming_both_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages.server, "SOURCE_TREE_CONFIG", tmp_path / "src" / ".streamlit" / "config.toml")
    monkeypatch.setattr(pages.server, "PACKAGED_CONFIG", tmp_path / "pages" / "_streamlit" / "config.toml")
    with pytest.raises(FileNotFoundError) as raised:
        pages.server.streamlit_config_file()
    assert str(raised.value) == (
        f"stabscope serve: Streamlit's settings are missing: neither {tmp_path}/src/.streamlit/config.toml (a "
        f"source tree) nor {tmp_path}/pages/_streamlit/config.toml (an installed wheel) exists. Reinstall "
        "StabScope (pip install . or the wheel)."
    )


def test_no_module_of_pages_shadows_a_standard_or_installed_one() -> None:
    """serve's main script lies in pages/ (pages/navigation.py), and Streamlit puts the main script's folder
    first on sys.path: a module of pages/ named like a standard or installed module (``profile.py``,
    ``secrets.py``) would be imported in its place by whatever imports that module later."""
    own = {path.stem for path in (REPO_ROOT / "pages").glob("*.py")}
    taken = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    assert not own & taken


@pytest.mark.slow
@pytest.mark.system
def test_serve_applies_every_setting_of_the_repos_config(installed: Installed) -> None:
    """The same, in the fresh environment: the wheel's copy of the config, from a folder outside the tree."""
    expected = _flat(tomllib.loads(REPO_CONFIG.read_text()))
    effective = json.loads(installed.run(str(installed.python), "-c", EFFECTIVE_OPTIONS, json.dumps(list(expected))))
    _check_effective_options(effective, expected)


def _non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP socket's own address: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.fixture(scope="module")
def served(installed: Installed) -> Iterator[tuple[str, int, str]]:
    """``stabscope serve`` of the fresh install on a new store (demo runs seeded on its first start);
    its URL, port and the access token it made and printed (private by default) once it answers.
    Stopped at the end, whatever happened."""
    port = _free_port()
    log = installed.outside / "serve.log"
    cmd = [str(installed.venv / "bin" / "stabscope"), "serve", "--port", str(port), "--store", "store"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=installed.outside, env=installed.env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc, log, timeout_s=240)  # the first start writes the demo runs
        yield url, port, printed_token(log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.browser
def test_the_installed_server_renders_the_runs_and_the_reference_results(served: tuple[str, int, str]) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (bash .ci/test installs it)")
    from playwright.sync_api import sync_playwright

    url, port, token = served
    demo_runs = demo_run_names()
    frames: list[bytes] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)

            def keep_frames(socket: Any) -> None:
                socket.on("framereceived", lambda f: frames.append(f) if isinstance(f, bytes) else None)

            page.on("websocket", keep_frames)
            page.goto(f"{url}/?token={token}")  # the address serve printed; the gate's cookie from then on
            _settle(page)
            assert page.locator("[data-testid='stException']").count() == 0
            assert page.get_by_text(f"{len(demo_runs)} of {len(demo_runs)} runs.").is_visible()
            # a demo run by name, through the page's search box
            name = demo_runs[0]
            matching = sum(name.lower() in other.lower() for other in demo_runs)
            search = page.get_by_role("textbox", name="Search")
            search.fill(name)
            search.press("Enter")
            page.get_by_text(f"{matching} of {len(demo_runs)} runs.").wait_for(timeout=30_000)
            # links between pages resolve from the installed main script's folder too (a link that does not
            # is drawn as plain text by pages.parts.widgets.nav_link)
            page.get_by_role("link", name="Upload logs").first.click()
            page.wait_for_url(f"{url}/upload", timeout=30_000)
            # the theme of .streamlit/config.toml reached the browser (the session's first message)
            assert any(b"#d9480f" in f for f in frames) and any(b"#ff6b2c" in f for f in frames)

            page.goto(f"{url}/scenarios")
            _settle(page)
            assert page.get_by_text("the reference run shipped with StabScope").first.is_visible()
            assert page.locator("[data-testid='stException']").count() == 0
        finally:
            browser.close()
    # listening on 127.0.0.1 only (the config's address): this machine's other address is refused
    address = _non_loopback_address()
    if address is not None:
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=5):
            pass
