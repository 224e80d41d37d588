"""The server process of ``stabscope serve`` (not a page): ``ingest.cli`` resolves the store, the
address and the access token, then replaces its own process with this one (``os.execv``), so that the
CLI never loads Streamlit and a ``kill`` of the PID the user started stops the server. Here it says
where it listens (and warns before it listens beyond this machine) and starts Streamlit there."""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import re
import socket
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app.py"
"""The Streamlit entry point this process runs."""


def page_scripts() -> list[str]:
    """The page scripts app.py navigates to (``runs``, ``upload``...): the other modules of pages/ are
    the helpers they import. A page script draws when it runs, so it is never imported ahead."""
    return sorted(set(re.findall(r'st\.Page\("pages/(\w+)\.py"', APP.read_text())))


DEFAULT_HOST = "127.0.0.1"
"""Where the server listens unless told otherwise: this machine only, as TensorBoard and Jupyter do."""
LOOPBACK_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
"""The Host headers a loopback-only server without a token accepts on its WebSocket: a web page the
viewer visits cannot then reach it through a DNS name it points at 127.0.0.1 (DNS rebinding)."""


def main(port: int, host: str = DEFAULT_HOST) -> int:
    """Say where the dashboard listens (and warn when that is beyond this machine), prepare, seed the
    demo runs on a first start, then run Streamlit on app.py (blocks); the exit status."""
    from pages.token_gate import expected_token

    exposed = listens_beyond_loopback(host)
    has_token = expected_token() is not None
    _announce(host, port, exposed=exposed, has_token=has_token)
    _prepare_server()
    from ingest.cli import EXIT_ERROR, seed_before_serving

    if not os.environ.get("STABSCOPE_NO_DEMO"):
        status = seed_before_serving()
        if status:
            return status
    from streamlit.web.cli import main as streamlit_main

    flags = ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    flags += streamlit_address_flags(host, exposed=exposed, has_token=has_token)
    try:
        streamlit_main(args=["run", str(APP), *flags], prog_name="streamlit")
    except SystemExit as exc:  # click ends its command with sys.exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    return 0


def listens_beyond_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` (an address or a name) can be reached from other machines:
    anything but loopback addresses, the wildcards 0.0.0.0 and :: included. A name that does not
    resolve counts as reaching beyond (the CLI refuses one before it gets here)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return True
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    return not addresses or not all(address.is_loopback for address in addresses)


def streamlit_address_flags(host: str, *, exposed: bool, has_token: bool) -> list[str]:
    """Streamlit's flags for listening on ``host``: the bind address; the Host names a loopback-only
    server without a token answers (:data:`LOOPBACK_HOST_NAMES`); and, for one named address beyond
    this machine, the URL Streamlit prints (.streamlit/config.toml names localhost)."""
    flags = ["--server.address", host]
    if not exposed and not has_token:
        for name in LOOPBACK_HOST_NAMES:
            flags += ["--server.allowedHosts", name]
    if exposed and not _is_wildcard(host):
        flags += ["--browser.serverAddress", host]
    return flags


def _announce(host: str, port: int, *, exposed: bool, has_token: bool) -> None:
    """On stderr, before anything listens: the URL to open, the address other machines use when the
    server listens on every interface, and a warning when it listens beyond this machine."""
    store = os.environ.get("STABSCOPE_STORE", "")
    shown = "localhost" if not exposed or _is_wildcard(host) else _url_host(host)
    print(f"StabScope on http://{shown}:{port} (store {store})", file=sys.stderr)
    if not exposed:
        return
    if _is_wildcard(host):
        _print_network_url(port)
    where = f"{_url_host(host)}:{port}, which other machines can reach"
    if has_token:
        print(
            f"stabscope serve: listening on {where}; viewers must enter the access token. The connection "
            "is plain HTTP, so the token and the runs cross the network unencrypted: put an HTTPS reverse "
            "proxy in front, or leave out --host (this machine only) and reach it through an SSH tunnel "
            f"(ssh -L {port}:127.0.0.1:{port} THIS-HOST).",
            file=sys.stderr,
        )
        return
    print(
        f"stabscope serve: warning: listening on {where}, with no access token: anyone who can reach "
        f"this port can read every run in the store ({store}), upload logs and delete runs. To keep it "
        "private, leave out --host (the server then listens on 127.0.0.1, this machine only) and open it "
        f"through an SSH tunnel (ssh -L {port}:127.0.0.1:{port} THIS-HOST), or set a token: "
        "STABSCOPE_TOKEN in the environment or --token-file PATH.",
        file=sys.stderr,
    )


def _is_wildcard(host: str) -> bool:
    """Whether ``host`` is 0.0.0.0 or :: (every interface)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _prepare_server() -> None:
    """Before the server listens.

    Streamlit treats a folder named pages/ beside the entry script as an old-style multipage app until
    app.py has called st.navigation once; a deep link (/overview) as the first request of a fresh
    server would then run that page without app.py. Declaring the app navigation-driven before
    start-up avoids it (the ``pages`` package also recovers from it, with one extra rerun, under a
    plain ``streamlit run app.py``).

    It also imports what every page needs (numpy, pandas, DuckDB, Plotly: every page helper), as a
    server that preloads its app does: ready means ready, and the first browser session does not wait
    for them (Streamlit itself imports them lazily)."""
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    # Decorating a cached function before the server's runtime exists makes Streamlit check its
    # settings against a stand-in and warn "No runtime found" once per function; the caches
    # themselves are made on first call, inside the runtime. The user would see only noise.
    caching = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = caching.level
    caching.setLevel(logging.ERROR)
    skipped = {"__init__", "server", *page_scripts()}
    try:
        for module in sorted(p.stem for p in APP.with_name("pages").glob("*.py") if p.stem not in skipped):
            importlib.import_module(f"pages.{module}")
    finally:
        caching.setLevel(level)


def _print_network_url(port: int) -> None:
    """The address other machines reach a server listening on every interface at (Streamlit does not
    print it: the app's config names the browser address, so that it does not look its external
    address up online)."""
    from streamlit import net_util

    address = net_util.get_internal_ip()  # a UDP socket's own address: nothing is sent
    if address and not address.startswith("127."):
        print(f"  from another machine: http://{address}:{port}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), *sys.argv[2:3]))
