"""One gate for every route (issue #33 items 1-5), attacked as the probes did: real ``stabscope serve``
processes on 127.0.0.1, real HTTP requests and a real WebSocket client (``websockets``), and, where the
test runs as root, a second local user (uid 65534) in a child process.

Before the gate, a client that never gave the token uploaded 3 x 105 MB into the server's memory, read
``/_stcore/metrics``, could send ``clear_cache``, and resumed a session by its id; ``serve`` without a
token was open to every user of the machine; ``streamlit run app.py`` answered a DNS-rebinding Host."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ingest.services.run_analyses import open_analysed_store
from pages.access_gate import GateSettings, cookie_valid, host_allowed, signed_cookie
from tests.conftest import REPO_ROOT, SMALL_RUN, RunSpec, write_run
from tests.test_browser import _free_port, _wait_healthy

pytestmark = pytest.mark.slow

UPLOAD_BYTES = 100 * 1024 * 1024
"""The refused upload's size: one of the probe's three 105 MB files."""
PEAK_LIMIT_KB = 512 * 1024
"""The most memory (KiB) a refused hostile input may cost the server."""
NOBODY = 65534


class Served:
    """A running server: its port, process, output and (when it has one) the token it printed."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.port, self.proc, self.log = port, proc, log
        printed = re.search(r"/\?token=([A-Za-z0-9_-]+)", log.read_text())
        self.token = printed.group(1) if printed else None

    def rss_kb(self, field: str = "VmRSS") -> int:
        """The server's resident memory (``VmRSS``) or its peak (``VmHWM``), KiB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


@contextlib.contextmanager
def _start(tmp_path: Path, *serve_args: str, streamlit_run: bool = False, token: str | None = None) -> Iterator[Served]:
    store = tmp_path / "store"
    write_run(open_analysed_store(store), RunSpec())
    port = _free_port()
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "STABSCOPE_TOKEN"}
    if token:
        env["STABSCOPE_TOKEN"] = token
    if streamlit_run:  # the development server, from the source tree
        env |= {"STABSCOPE_STORE": str(store), "STABSCOPE_NO_DEMO": "1"}
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    else:
        env |= {"PYTHONPATH": str(REPO_ROOT)}
        cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(store), "--port", str(port), "--no-demo"]
        cmd += serve_args
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        yield Served(port, proc, log)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``stabscope serve`` as the README starts it: no token given, so it makes one."""
    with _start(tmp_path_factory.mktemp("gate")) as served:
        yield served


def _request(port: int, method: str, path: str, *, host: str | None = None, cookie: str | None = None,
             body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """One HTTP request to the server on 127.0.0.1: status, headers (lower-case names), body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if cookie:
        headers["Cookie"] = cookie
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    answer = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    conn.close()
    return answer


def _sign_in(served: Served) -> str:
    """The cookie the server sets for ``?token=`` (``name=value``)."""
    assert served.token is not None
    status, headers, _ = _request(served.port, "GET", f"/overview?token={served.token}&view=kept")
    assert status == 303 and headers["location"] == "/overview?view=kept", headers  # the token leaves the address
    set_cookie = headers["set-cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Max-Age=" in set_cookie
    return set_cookie.split(";")[0]


def _handshake(port: int, *, host: str | None = None, cookie: str | None = None, protocols: str = "streamlit") -> int:
    """The HTTP status answering a WebSocket handshake on ``/_stcore/stream`` (101: accepted)."""
    host = host or f"127.0.0.1:{port}"
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /_stcore/stream HTTP/1.1", f"Host: {host}", f"Origin: http://{host}", "Upgrade: websocket",
        "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
        f"Sec-WebSocket-Protocol: {protocols}",
    ]  # fmt: skip
    if cookie:
        lines.append(f"Cookie: {cookie}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = conn.recv(4096).split(b"\r\n")[0].decode()
    return int(status_line.split()[1])


def _session_frames(port: int, cookie: str | None, session_id: str = "") -> tuple[str, bytes]:
    """Run the app's first page over a real WebSocket (``websockets``): the session id Streamlit gave and
    every frame received until the script finished. ``session_id`` asks to resume that session."""
    protocols = ["streamlit", "unused-xsrf", session_id] if session_id else ["streamlit"]
    headers = {"Cookie": cookie} if cookie else {}
    url = f"ws://127.0.0.1:{port}/_stcore/stream"
    with connect(url, additional_headers=headers, subprotocols=protocols, origin=f"http://127.0.0.1:{port}") as ws:  # type: ignore[arg-type]
        rerun = BackMsg()
        rerun.rerun_script.query_string = ""
        rerun.rerun_script.page_script_hash = ""
        ws.send(rerun.SerializeToString())
        frames, new_id = b"", ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            frame = ws.recv(timeout=60)
            assert isinstance(frame, bytes)
            frames += frame
            message = ForwardMsg()
            message.ParseFromString(frame)
            kind = message.WhichOneof("type")
            if kind == "new_session":
                new_id = message.new_session.initialize.session_id
            if kind == "script_finished":
                break
    return new_id, frames


# --- before the token: every route refused ----------------------------------------------------------


def test_serve_makes_a_token_and_prints_the_address_carrying_it(served: Served) -> None:
    assert served.token is not None and len(served.token) >= 16, served.log.read_text()
    assert f"http://localhost:{served.port}/?token={served.token}" in served.log.read_text()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/overview"),
        ("GET", "/_stcore/metrics"),
        ("GET", "/_stcore/host-config"),
        ("GET", "/media/0123456789abcdef.png"),
        ("GET", "/static/index.html"),
        ("PUT", "/_stcore/upload_file/some-session/some-file"),
        ("GET", "/component/x/index.html"),
    ],
)
def test_every_route_is_refused_before_the_token(served: Served, method: str, path: str) -> None:
    status, _, body = _request(served.port, method, path, body=b"x" if method == "PUT" else None)
    assert status == 403
    assert SMALL_RUN.encode() not in body and b"<script" not in body  # the sign-in page, not the app's shell


def test_the_sign_in_page_runs_nothing_and_cannot_be_framed(served: Served) -> None:
    status, headers, body = _request(served.port, "GET", "/overview?view=<script>x</script>")
    assert status == 403 and b'<label for="token">Access token</label>' in body
    assert b"<script>" not in body  # the return address is escaped
    assert "default-src 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"


def test_the_health_check_stays_open(served: Served) -> None:
    assert _request(served.port, "GET", "/_stcore/health")[:1] == (200,)


def test_websocket_without_the_cookie_is_refused_so_no_message_reaches_a_session(served: Served) -> None:
    assert _handshake(served.port) == 403
    with pytest.raises(InvalidStatus) as refused:  # a real client: nothing sent, clear_cache included
        _session_frames(served.port, cookie=None)
    assert refused.value.response.status_code == 403


def test_a_refused_upload_is_not_read_into_memory(served: Served) -> None:
    """The probe's attack: 100 MB PUT to the upload endpoint without the token. The gate answers 403
    on the headers; the body is discarded as it arrives, never held."""
    before = served.rss_kb()
    conn = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    head = (
        f"PUT /_stcore/upload_file/s/f HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
    )
    conn.sendall(head.encode())
    chunk = b"\0" * (1024 * 1024)
    sent = 0
    try:
        while sent < UPLOAD_BYTES:
            conn.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass  # the server may close the connection once it has answered
    conn.settimeout(30)
    try:
        answer = conn.recv(4096)
    except OSError:
        answer = b""
    conn.close()
    time.sleep(1)
    after, peak = served.rss_kb(), served.rss_kb("VmHWM")
    if answer:
        assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert after - before < 30 * 1024, f"RSS grew {before} -> {after} KiB"
    assert peak < PEAK_LIMIT_KB, f"server peak {peak} KiB"


def test_wrong_tokens_are_logged_and_slowed(served: Served) -> None:
    _sign_in(served)  # a right token starts the address's count again
    times = []
    for attempt in range(5):
        start = time.monotonic()
        status, _, body = _request(served.port, "GET", f"/?token=wrong-guess-{attempt}")
        times.append(time.monotonic() - start)
        assert status == 403 and b"not this dashboard's access token" in body
    assert times[3] >= 0.45 and times[4] >= 0.95, times  # FREE_FAILURES, then 0.5 s doubling
    log = served.log.read_text()
    assert "wrong access token (in the address) from 127.0.0.1: failure 5" in log and "wrong-guess" not in log
    status, _, _ = _request(served.port, "POST", "/_stabscope/sign-in", body=b"token=wrong-again&next=/")
    assert status == 403  # the form path too


def test_wrong_tokens_sent_in_parallel_wait_their_turn(served: Served) -> None:
    """Guesses on parallel connections are slowed as much as one after the other: 6 at once take the
    sum of their delays (0 + 0 + 0 + 0.5 + 1 + 2 s), not the longest one."""
    from concurrent.futures import ThreadPoolExecutor

    _sign_in(served)  # a right token starts the address's count again
    start = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda i: _request(served.port, "GET", f"/?token=parallel-{i}")[0], range(6)))
    elapsed = time.monotonic() - start
    assert statuses == [403] * 6 and elapsed >= 3.4, elapsed
    _sign_in(served)


# --- with the cookie -------------------------------------------------------------------------------


def test_with_the_cookie_every_route_works(served: Served) -> None:
    cookie = _sign_in(served)
    assert _request(served.port, "GET", "/_stcore/metrics", cookie=cookie)[0] == 200
    assert _request(served.port, "GET", "/", cookie=cookie)[0] == 200
    # past the gate, Streamlit's own XSRF check answers the upload (its message, not the gate's)
    status, _, body = _request(served.port, "PUT", "/_stcore/upload_file/s/f", cookie=cookie, body=b"x")
    assert status == 403 and b"XSRF" in body
    assert _handshake(served.port, cookie=cookie) == 101
    session_id, frames = _session_frames(served.port, cookie)
    assert session_id and SMALL_RUN.encode() in frames  # the Runs page, with the run


def test_the_sign_in_form_sets_the_cookie_and_returns_to_the_page(served: Served) -> None:
    body = f"token={served.token}&next=/upload".encode()
    status, headers, _ = _request(served.port, "POST", "/_stabscope/sign-in", body=body)
    assert status == 303 and headers["location"] == "/upload" and "HttpOnly" in headers["set-cookie"]
    body = f"token={served.token}&next=//attacker.example/".encode()  # never a redirect elsewhere
    assert _request(served.port, "POST", "/_stabscope/sign-in", body=body)[1]["location"] == "/"


def test_a_session_id_without_the_cookie_resumes_nothing(served: Served) -> None:
    """Item 3: a session id (it appears in upload URLs, so in proxy logs) is not a credential."""
    cookie = _sign_in(served)
    session_id, _ = _session_frames(served.port, cookie)
    assert session_id
    assert _handshake(served.port, protocols=f"streamlit, unused-xsrf, {session_id}") == 403
    with pytest.raises(InvalidStatus):
        _session_frames(served.port, cookie=None, session_id=session_id)


def test_a_forged_or_expired_cookie_is_refused(served: Served) -> None:
    name = f"stabscope_access_{served.port}"
    forged = GateSettings(token="x" * 16, allowed_hosts=None, cookie_name=name)  # another secret
    assert _request(served.port, "GET", "/_stcore/metrics", cookie=f"{name}={signed_cookie(forged)}")[0] == 403
    assert _request(served.port, "GET", "/_stcore/metrics", cookie=f"{name}=9999999999.00")[0] == 403


def test_cookie_signature_and_expiry() -> None:
    settings = GateSettings(token="t" * 16, allowed_hosts=None, cookie_name="c")
    value = signed_cookie(settings, now=1000.0)
    assert cookie_valid(settings, value, now=1000.0 + settings.max_age_s - 1)
    assert not cookie_valid(settings, value, now=1000.0 + settings.max_age_s + 1)  # expired
    expires, signature = value.split(".")
    assert not cookie_valid(settings, f"{int(expires) + 3600}.{signature}", now=1000.0)  # extended by hand
    assert not cookie_valid(GateSettings(token="t" * 16, allowed_hosts=None, cookie_name="other"), value, now=1000.0)
    assert not any(cookie_valid(settings, bad) for bad in (None, "", "1.2.3", "abc.def", value + "0"))


def test_host_allow_list_ignores_port_case_and_final_dot() -> None:
    settings = GateSettings(token=None, allowed_hosts=frozenset({"localhost", "127.0.0.1", "::1"}), cookie_name="c")
    assert all(host_allowed(settings, h) for h in ("localhost:8501", "LOCALHOST.", "127.0.0.1", "[::1]:8501"))
    assert not any(host_allowed(settings, h) for h in ("attacker.example", "localhost.attacker.example", None, "a b"))


# --- a second local user ---------------------------------------------------------------------------

_AS_NOBODY = """
import base64, encodings.idna, http.client, json, os, socket, sys
os.setgid({uid}); os.setuid({uid})  # what it needs is imported first: root's Python may be unreadable to it
port, pid = int(sys.argv[1]), int(sys.argv[2])
def status(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers={{"Host": f"127.0.0.1:{{port}}"}})
    r = c.getresponse(); r.read(); return r.status
key = base64.b64encode(os.urandom(16)).decode()
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    s.sendall((f"GET /_stcore/stream HTTP/1.1\\r\\nHost: 127.0.0.1:{{port}}\\r\\nUpgrade: websocket\\r\\n"
               f"Connection: Upgrade\\r\\nSec-WebSocket-Key: {{key}}\\r\\n"
               "Sec-WebSocket-Version: 13\\r\\n\\r\\n").encode())
    ws = int(s.recv(4096).split(b"\\r\\n")[0].split()[1])
try:
    open(f"/proc/{{pid}}/environ", "rb").read(); environ = "readable"
except OSError:
    environ = "refused"
upload = status("PUT", "/_stcore/upload_file/s/f", b"x")
print(json.dumps({{"uid": os.getuid(), "page": status("GET", "/"), "upload": upload,
                  "metrics": status("GET", "/_stcore/metrics"), "websocket": ws, "environ": environ}}))
"""


def test_a_second_local_user_without_the_token_gets_nothing(served: Served) -> None:
    """Item 4: loopback is shared by every user of a login node. Another user (uid 65534, in a child
    that drops root) without the token: 403 on the pages, the upload and the WebSocket, and the
    server's environment (where the token lives) is unreadable to it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user (uid 65534); CI runs the suite as root")
    code = _AS_NOBODY.format(uid=NOBODY)
    done = subprocess.run(
        [sys.executable, "-c", code, str(served.port), str(served.proc.pid)],
        capture_output=True, text=True, timeout=120, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"uid": NOBODY, "page": 403, "upload": 403, "metrics": 403, "websocket": 403, "environ": "refused"}


# --- no token, and the development server ------------------------------------------------------------


def test_no_token_warns_and_still_answers_only_loopback_names(tmp_path: Path) -> None:
    """``--no-token`` opts out of the token with a warning; the Host check (DNS rebinding) then guards
    every route, not only the WebSocket."""
    with _start(tmp_path, "--no-token") as served:
        port = served.port
        assert _request(port, "GET", "/_stcore/metrics")[0] == 200
        assert _handshake(port, host=f"localhost:{port}") == 101
        for path in ("/_stcore/metrics", "/", "/_stcore/health"):
            assert _request(port, "GET", path, host=f"attacker.example:{port}")[0] == 403
        assert _request(port, "PUT", "/_stcore/upload_file/s/f", host="attacker.example", body=b"x")[0] == 403
        assert _handshake(port, host=f"attacker.example:{port}") == 403
    log = (tmp_path / "server.log").read_text()
    assert "warning: --no-token" in log and "?token=" not in log, log


def test_streamlit_run_refuses_a_rebinding_host(tmp_path: Path) -> None:
    """Item 2: ``streamlit run app.py`` runs app.py's ``st.App`` behind the same gate: without a token,
    only loopback Host names, on every route; a page on ``attacker.example`` gets no session, so no run."""
    with _start(tmp_path, streamlit_run=True) as served:
        port = served.port
        assert _handshake(port, host=f"attacker.example:{port}") == 403
        assert _request(port, "GET", "/_stcore/metrics", host=f"attacker.example:{port}")[0] == 403
        assert _request(port, "PUT", "/_stcore/upload_file/s/f", host="attacker.example", body=b"x")[0] == 403
        assert _handshake(port, host=f"localhost:{port}") == 101
        _, frames = _session_frames(port, cookie=None)
        assert SMALL_RUN.encode() in frames


def test_streamlit_run_with_a_token_has_the_serve_gate(tmp_path: Path) -> None:
    token = "development-token-1234"
    with _start(tmp_path, streamlit_run=True, token=token) as served:
        served.token = token
        port = served.port
        assert _request(port, "GET", "/_stcore/metrics")[0] == 403
        assert _request(port, "PUT", "/_stcore/upload_file/s/f", body=b"x")[0] == 403
        assert _handshake(port) == 403
        cookie = _sign_in(served)
        _, frames = _session_frames(port, cookie)
        assert SMALL_RUN.encode() in frames  # the gate's cookie opens the app's own token check too


def test_the_gate_fails_closed_when_streamlit_moves_its_app_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve must not start without the gate: a Streamlit whose server no longer builds its app where
    the gate hooks in is refused, naming the version (pages.server prints it and exits 2)."""
    from streamlit.web.server.starlette import starlette_server

    import pages.access_gate as gate

    settings = GateSettings(token="t" * 16, allowed_hosts=None, cookie_name="c")
    monkeypatch.delattr(starlette_server, "create_starlette_app")
    with pytest.raises(RuntimeError, match=r"cannot put the access gate in front of Streamlit \d"):
        gate.install(settings)
    assert gate.active_settings() is None


class _AppBuilt:
    """What Streamlit's factory returns, as far as the gate uses it: ``add_middleware``."""

    def __init__(self) -> None:
        self.middleware: list[tuple[type, dict[str, object]]] = []

    def add_middleware(self, cls: type, **options: object) -> None:
        self.middleware.append((cls, options))


def test_installing_twice_wraps_streamlit_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.web.server.starlette import starlette_server

    import pages.access_gate as gate

    monkeypatch.setattr(starlette_server, "create_starlette_app", lambda runtime: _AppBuilt())
    monkeypatch.setattr(gate, "_ACTIVE", None)
    first = GateSettings(token="a" * 16, allowed_hosts=None, cookie_name="c")
    second = GateSettings(token="b" * 16, allowed_hosts=None, cookie_name="c")
    gate.install(first)
    gate.install(second)
    app = starlette_server.create_starlette_app(None)
    assert app.middleware == [(gate.AccessGate, {"settings": second})] and gate.active_settings() is second


def test_no_token_and_a_token_together_are_refused(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(tmp_path / "s"), "--no-token", "--token", "x" * 20]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2 and "not allowed with argument" in done.stderr, done.stderr
