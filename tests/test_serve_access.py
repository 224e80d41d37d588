"""Private by default (issue #23): ``stabscope serve`` listens on 127.0.0.1 unless ``--host`` says
otherwise, warns before it listens beyond this machine, keeps Streamlit's XSRF check on, and a server
started with a token shows a session nothing of the store until it gives the token (app.py's gate,
``pages.parts.token_gate``).

The servers are real (``stabscope serve`` on a free port, a temp store, no demo runs) and where they
listen is checked with sockets; the gate is checked through AppTest of app.py and once in Chromium."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from pages.parts.token_gate import token_matches
from pages.server import listens_beyond_loopback, streamlit_address_flags
from tests.app_pages import open_in_app
from tests.conftest import REPO_ROOT, SMALL_RUN, RunSpec, write_run
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from tests.test_serve import _server, printed_token, sign_in_cookie

TOKEN = "s3cret-Tok3n-for-the-gate"
LIVE_RUN = "live-private-run"
"""A live run: its alerts are banners on every page of an open session."""
REFUSED = "That is not this dashboard's access token"
RUNS_TABLE = ".st-key-runs_table canvas"
"""The Runs page's catalog table, drawn (not the off-screen warm-up table)."""
NO_TOKEN_WARNING = "with no access token: anyone who can reach this port can read every run"


def _other_interface_address() -> str | None:
    """A non-loopback IPv4 address of this machine (one it can bind), or None where it has only
    loopback. The UDP ``connect`` only picks the route's source address: nothing is sent."""
    candidates: list[str] = []
    with contextlib.suppress(OSError):
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            udp.connect(("192.0.2.1", 9))
            candidates.append(udp.getsockname()[0])
        except OSError:
            pass
    for address in candidates:
        if ipaddress.ip_address(address).is_loopback:
            continue
        try:
            with socket.socket() as probe:
                probe.bind((address, 0))
        except OSError:
            continue
        return address
    return None


def _connects(address: str, port: int) -> bool:
    """Whether a TCP connection to ``address:port`` is accepted."""
    try:
        with socket.create_connection((address, port), timeout=5):
            return True
    except OSError:
        return False


def _websocket_status(port: int, host_header: str, cookie: str | None = None) -> int:
    """The HTTP status with which the server answers a browser's WebSocket handshake (101: accepted)
    sent to 127.0.0.1 with ``host_header`` as its Host and Origin, as a page on a DNS name pointed at
    127.0.0.1 would send it (DNS rebinding)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host_header}\r\nOrigin: http://{host_header}\r\n"
        f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        + (f"Cookie: {cookie}\r\n" if cookie else "")
        + "\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        status_line = conn.recv(4096).split(b"\r\n")[0].decode()
    return int(status_line.split()[1])


def _xsrf_refuses_an_upload(url: str, cookie: str) -> bool:
    """Whether the server refuses a file upload that carries no XSRF token with 403 (with the check
    off, Streamlit would answer 400 for the unknown session instead). ``cookie``: the access gate's,
    so that the request reaches Streamlit's check."""
    request = urllib.request.Request(
        f"{url}/_stcore/upload_file/no-session/no-file", data=b"x", method="PUT", headers={"Cookie": cookie}
    )
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as exc:
        return exc.code == 403 and b"XSRF" in exc.read()
    return False


@pytest.mark.slow
def test_serve_listens_on_loopback_only_by_default(tmp_path: Path) -> None:
    with _server(tmp_path, serve=True) as (url, _):
        port = urlsplit(url).port
        assert port is not None
        assert _connects("127.0.0.1", port)
        other = _other_interface_address()
        if other is not None:
            assert not _connects(other, port), f"reachable from the network at {other}:{port}"
        cookie = sign_in_cookie(url, printed_token(tmp_path / "server.log"))  # private by default (#33 item 4)
        assert _xsrf_refuses_an_upload(url, cookie)
        assert _websocket_status(port, f"localhost:{port}", cookie) == 101
        assert _websocket_status(port, f"127.0.0.1:{port}", cookie) == 101
        assert _websocket_status(port, f"localhost:{port}") == 403  # without the cookie (tests/test_security_gate.py)
        assert _websocket_status(port, f"rebind.attacker.example:{port}") == 403
    log = (tmp_path / "server.log").read_text()
    assert f"StabScope on http://localhost:{port}" in log
    assert "Uvicorn server started on 127.0.0.1:" in log, log
    assert "from another machine" not in log and "warning" not in log.lower(), log
    if other is None:
        pytest.skip("this machine has only loopback: the 'not on the other interface' half did not run")


@pytest.mark.slow
def test_serve_on_every_interface_without_a_token_warns_before_it_listens(tmp_path: Path) -> None:
    other = _other_interface_address()
    with _server(tmp_path, serve=True, serve_args=["--host", "0.0.0.0", "--no-token"]) as (url, _):
        port = urlsplit(url).port
        assert port is not None
        if other is not None:
            assert _connects(other, port)
    log = (tmp_path / "server.log").read_text()
    assert NO_TOKEN_WARNING in log, log
    assert "ssh -L" in log and "STABSCOPE_TOKEN" in log and "--token-file" in log
    assert log.index(NO_TOKEN_WARNING) < log.index("Uvicorn server started on 0.0.0.0:"), log
    if other is not None:
        assert f"from another machine: http://{other}:{port}" in log, log


@pytest.mark.slow
def test_serve_with_a_token_keeps_it_out_of_the_process_list_and_the_log(tmp_path: Path) -> None:
    """``--token`` is in the CLI's argv only until the server replaces the process: ``ps`` of the
    running server (its /proc cmdline) and its output do not show it."""
    with _server(tmp_path, serve=True, serve_args=["--host", "0.0.0.0", "--token", TOKEN]) as (url, proc):
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"pages.server" in cmdline and TOKEN.encode() not in cmdline
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()  # readable by its user only
        assert f"STABSCOPE_TOKEN={TOKEN}".encode() in environ.split(b"\0")
        cookie = sign_in_cookie(url, TOKEN)
        assert _xsrf_refuses_an_upload(url, cookie)
        port = urlsplit(url).port
        assert port is not None  # with a token, any Host (a proxy's name): the gate's cookie keeps the runs
        assert _websocket_status(port, f"dashboard.example.org:{port}", cookie) == 101
    log = (tmp_path / "server.log").read_text()
    assert "viewers must enter the access token" in log and NO_TOKEN_WARNING not in log, log
    assert TOKEN not in log


def test_serve_refuses_an_address_it_cannot_listen_on(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(tmp_path / "s"), "--host", "192.0.2.254"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "cannot listen on --host '192.0.2.254'" in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_an_empty_token_file(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(tmp_path / "s"), "--token-file", str(empty)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"the access token file {empty} (--token-file) is empty" in done.stderr


def test_effective_config_keeps_xsrf_on_details_hidden_and_localhost() -> None:
    """Streamlit's settings as a plain ``streamlit run app.py`` in the repository resolves them."""
    code = (
        "import json\nfrom streamlit import config\nconfig.get_config_options(force_reparse=True)\n"
        "names = ['server.enableXsrfProtection', 'client.showErrorDetails', 'server.address']\n"
        "print(json.dumps({n: config.get_option(n) for n in names}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    options = json.loads(done.stdout.strip().splitlines()[-1])
    assert options == {
        "server.enableXsrfProtection": True,
        "client.showErrorDetails": "none",
        "server.address": "127.0.0.1",
    }


@pytest.mark.parametrize(
    ("host", "beyond"),
    [("127.0.0.1", False), ("localhost", False), ("::1", False), ("0.0.0.0", True), ("::", True), ("192.0.2.7", True)],
)
def test_listens_beyond_loopback(host: str, beyond: bool) -> None:
    assert listens_beyond_loopback(host) is beyond


def test_streamlit_address_flags() -> None:
    # loopback without a token: only loopback Host names on the WebSocket (no DNS rebinding)
    assert streamlit_address_flags("127.0.0.1", exposed=False, has_token=False) == [
        "--server.address", "127.0.0.1", "--server.allowedHosts", "localhost",
        "--server.allowedHosts", "127.0.0.1", "--server.allowedHosts", "::1",
    ]  # fmt: skip
    # behind a proxy with a token: any Host; one named address: Streamlit prints that URL
    assert streamlit_address_flags("127.0.0.1", exposed=False, has_token=True) == ["--server.address", "127.0.0.1"]
    assert streamlit_address_flags("0.0.0.0", exposed=True, has_token=True) == ["--server.address", "0.0.0.0"]
    assert streamlit_address_flags("192.0.2.7", exposed=True, has_token=False) == [
        "--server.address", "192.0.2.7", "--browser.serverAddress", "192.0.2.7",
    ]  # fmt: skip


def test_the_gate_module_loads_none_of_the_pages_libraries() -> None:
    """app.py imports it before the browser's warm-up (pages.parts.warmup), which must stay ahead of them."""
    heavy = [
        "pandas",
        "pyarrow",
        "duckdb",
        "ingest",
        "stab_core",
        "pages.parts.store_access",
        "pages.parts.page_errors",
    ]
    code = f"import sys, pages.parts.token_gate; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_token_matches() -> None:
    assert token_matches(TOKEN, TOKEN) and token_matches(f" {TOKEN}\n", TOKEN)
    assert not token_matches(TOKEN[:-1], TOKEN) and not token_matches("", TOKEN)
    assert not token_matches(TOKEN.upper(), TOKEN)
    assert token_matches("jeton-été", "jeton-été")  # not only ASCII


# --- the gate in app.py (AppTest) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gated_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store with a finished run and a live one (whose alerts are banners on every page)."""
    store = open_analysed_store(tmp_path_factory.mktemp("gated") / "store")
    write_run(store, RunSpec())
    write_run(store, RunSpec(name=LIVE_RUN, seed=3), status="live")
    return store


@pytest.fixture
def gated_app(gated_store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    """app.py on the Runs page of ``gated_store``, served with :data:`TOKEN` (not run yet)."""
    monkeypatch.setenv("STABSCOPE_STORE", str(gated_store.root))
    monkeypatch.setenv("STABSCOPE_TOKEN", TOKEN)
    yield open_in_app("runs", monkeypatch)


def _everything_drawn(at: AppTest) -> str:
    """Every element and block the run drew, main area and sidebar, as text (protobuf dumps: a
    table's Arrow bytes show its strings too)."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(parts)


def _labels(at: AppTest) -> list[str]:
    return [t.label for t in at.text_input]


def _shows_no_run(at: AppTest) -> None:
    drawn = _everything_drawn(at)
    assert SMALL_RUN not in drawn and LIVE_RUN not in drawn
    assert not at.dataframe and not at.warning  # no table, no alert banner
    assert TOKEN not in drawn  # never echoed


def _shows_the_runs(at: AppTest) -> None:
    assert not at.exception
    drawn = _everything_drawn(at)
    assert SMALL_RUN in drawn and LIVE_RUN in drawn
    names = set(at.dataframe(key="runs_table").value["name"])
    assert {SMALL_RUN, LIVE_RUN} <= names


def test_gate_asks_for_the_token_before_any_run_is_shown(gated_app: AppTest) -> None:
    at = gated_app.run()
    assert not at.exception
    assert _labels(at) == ["Access token"] and at.text_input[0].proto.type == at.text_input[0].proto.PASSWORD
    assert not at.error  # nothing refused yet
    _shows_no_run(at)


def test_gate_refuses_a_wrong_token_then_opens_with_the_right_one(gated_app: AppTest) -> None:
    at = gated_app.run()
    at.text_input[0].input("not-the-token")
    at = at.button[0].click().run()
    assert not at.exception
    assert len(at.error) == 1 and REFUSED in at.error[0].value and "not-the-token" not in _everything_drawn(at)
    _shows_no_run(at)
    at.text_input[0].input(TOKEN)
    at = at.button[0].click().run()
    _shows_the_runs(at)
    assert "Access token" not in _labels(at)
    at = at.run()  # remembered for the session: later runs need nothing
    _shows_the_runs(at)


def test_gate_takes_the_token_from_the_address_once_and_drops_it(gated_app: AppTest) -> None:
    gated_app.query_params["token"] = TOKEN
    gated_app.query_params["view"] = "kept"
    at = gated_app.run()
    _shows_the_runs(at)
    assert "token" not in at.query_params and at.query_params.get("view") == "kept"


def test_gate_refuses_a_wrong_token_in_the_address(gated_app: AppTest) -> None:
    gated_app.query_params["token"] = "guess"
    at = gated_app.run()
    assert not at.exception and "token" not in at.query_params
    assert len(at.error) == 1 and REFUSED in at.error[0].value
    _shows_no_run(at)


def test_no_token_no_gate(gated_app: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STABSCOPE_TOKEN")
    at = gated_app.run()
    _shows_the_runs(at)
    assert "Access token" not in _labels(at)


# --- in a real browser -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.browser
def test_browser_asks_for_the_token_then_shows_the_runs_table(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (bash .ci/test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    serve_args = ["--token-file", str(token_file)]
    with _server(tmp_path, serve=True, serve_args=serve_args) as (url, _), playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)  # one browser: its tabs share the gate's cookie
        page = context.new_page()
        page.goto(url)
        field = page.get_by_label("Access token")
        field.wait_for(timeout=60_000)
        hidden_before = page.locator('.st-key-runs_table, [data-testid="stSidebarNav"]').count()
        field.fill(TOKEN)
        page.get_by_role("button", name="Open the dashboard").click()
        page.locator(RUNS_TABLE).first.wait_for(timeout=60_000)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text(timeout=30_000)
        # the token binds to the browser (the gate's cookie), not to the session: a new tab of it opens
        same_browser = context.new_page()
        same_browser.goto(f"{url}/compare")
        same_browser.get_by_text("Compare").first.wait_for(timeout=60_000)
        asked_again = same_browser.get_by_label("Access token").count()
        # another browser (a new context: no cookie) is asked; a link with the token opens it
        second = browser.new_page(viewport=VIEWPORT)
        second.goto(f"{url}/?token={TOKEN}")
        second.locator(RUNS_TABLE).first.wait_for(timeout=60_000)
        second.wait_for_function("!location.search.includes('token')", timeout=30_000)
        second_url = second.url
        browser.close()
    assert hidden_before == 0 and "Runs" in nav and "Decision tree" in nav
    assert TOKEN not in second_url and asked_again == 0
