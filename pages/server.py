"""The server process of ``stabscope serve`` (not a page): ``ingest.cli`` resolves the store, the
address and the access token, then replaces its own process with this one (``os.execv``), so that the
CLI never loads Streamlit and a ``kill`` of the PID the user started stops the server. Here it says
where it listens (and warns before it listens beyond this machine) and starts Streamlit there."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

APP = Path(__file__).resolve().with_name("navigation.py")
"""The Streamlit main script this process runs: the app's own module, run as ``__main__`` (the source
tree's app.py is not installed with the package, this file is)."""
SOURCE_TREE_CONFIG = Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml"
"""Streamlit's settings for the app, the one copy (``streamlit run app.py`` reads it from there)."""
PACKAGED_CONFIG = Path(__file__).resolve().with_name("_streamlit") / "config.toml"
"""Where a built wheel holds its copy of :data:`SOURCE_TREE_CONFIG` (setup.py copies it at build time)."""


def page_scripts() -> list[str]:
    """The page scripts the app navigates to (``runs``, ``upload``...): the other modules of pages/ are
    the helpers they import. A page script draws when it runs, so it is never imported ahead."""
    from pages.navigation import page_scripts as listed

    return listed()


def streamlit_config_file() -> Path:
    """The app's Streamlit config.toml: the source tree's when this runs from one, else the wheel's copy.
    Raises FileNotFoundError naming both places when neither exists."""
    for path in (SOURCE_TREE_CONFIG, PACKAGED_CONFIG):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"stabscope serve: Streamlit's settings are missing: neither {SOURCE_TREE_CONFIG} (a source tree) nor "
        f"{PACKAGED_CONFIG} (an installed wheel) exists. Reinstall StabScope (pip install . or the wheel)."
    )


def streamlit_config_options(config_file: Path) -> dict[str, Any]:
    """Every option of a Streamlit config.toml by its dotted name (``server.maxUploadSize``,
    ``theme.light.primaryColor``): what ``streamlit run`` takes as ``--name value`` flags."""

    def flatten(table: dict[str, Any], prefix: str) -> dict[str, Any]:
        options: dict[str, Any] = {}
        for key, value in table.items():
            if isinstance(value, dict):
                options |= flatten(value, f"{prefix}{key}.")
            else:
                options[f"{prefix}{key}"] = value
        return options

    with config_file.open("rb") as file:
        return flatten(tomllib.load(file), "")


def streamlit_flags(options: dict[str, Any]) -> list[str]:
    """``--name value`` flags for Streamlit's command line: true/false in lower case, one flag per item
    of a list (``--server.allowedHosts a --server.allowedHosts b``)."""
    flags: list[str] = []
    for name, value in options.items():
        for item in value if isinstance(value, list) else [value]:
            flags += [f"--{name}", str(item).lower() if isinstance(item, bool) else str(item)]
    return flags


def serve_options(port: int, host: str, *, exposed: bool, has_token: bool, config_file: Path) -> dict[str, Any]:
    """Streamlit's options under ``stabscope serve``: every setting of the app's config.toml (Streamlit
    reads that file only from the current directory, or beside app.py, neither of which holds for an
    installed wheel started from anywhere), then the port and listening address serve chose."""
    options = streamlit_config_options(config_file)
    options |= {"server.port": port, "server.headless": True, "browser.gatherUsageStats": False}
    # config.toml names only the loopback Host names (for `streamlit run app.py`); serve decides below
    options.pop("server.allowedHosts", None)
    options |= streamlit_address_options(host, exposed=exposed, has_token=has_token)
    return options


GENERATED_TOKEN_ENV = "STABSCOPE_TOKEN_GENERATED"
"""Set to 1 by ``stabscope serve`` when it made the access token itself: the server then prints the
address carrying it. A token the user gave is never printed."""
DEMO_READY_ENV = "STABSCOPE_DEMO_READY"
"""Set to 1 in the server's environment once it has seeded the demo runs (or found them): the first page
then does not open the store to check again (``pages.parts.store_access.ensure_demo_runs``)."""
DEFAULT_HOST = "127.0.0.1"
"""Where the server listens unless told otherwise: this machine only, as TensorBoard and Jupyter do."""
LOOPBACK_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
"""The Host headers a loopback-only server without a token accepts on its WebSocket: a web page the
viewer visits cannot then reach it through a DNS name it points at 127.0.0.1 (DNS rebinding)."""


def main(port: int, host: str = DEFAULT_HOST, seed_demo: Callable[[], int] | None = None) -> int:
    """Say where the dashboard listens (and warn when that is beyond this machine), prepare, seed the
    demo runs on a first start with ``seed_demo`` (an exit status; ``stabscope serve`` passes
    ``ingest.cli.serve.seed_before_serving``), then run Streamlit on the app (:data:`APP`, blocks); the
    exit status."""
    from ingest.errors import EXIT_ERROR
    from pages.access_gate import install as install_gate
    from pages.access_gate import settings_for
    from pages.parts.token_gate import expected_token

    try:
        config_file = streamlit_config_file()
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    exposed = listens_beyond_loopback(host)
    token = expected_token()
    has_token = token is not None
    _announce(host, port, exposed=exposed, has_token=has_token)
    _prepare_server()
    try:  # before anything listens: every route behind the token and the Host check (pages.access_gate)
        # with a token, any Host (a reverse proxy's name): a rebinding page has no cookie for this server's name
        host_names = LOOPBACK_HOST_NAMES if not exposed and not has_token else None
        install_gate(settings_for(port, token, host_names=host_names))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    if seed_demo is not None and not os.environ.get("STABSCOPE_NO_DEMO"):
        status = seed_demo()
        if status:
            return status
        os.environ[DEMO_READY_ENV] = "1"  # the pages need not check the store again (pages.parts.store_access)
    from streamlit.web.cli import main as streamlit_main

    flags = streamlit_flags(serve_options(port, host, exposed=exposed, has_token=has_token, config_file=config_file))
    try:
        streamlit_main(args=["run", str(APP), *flags], prog_name="streamlit")
    except SystemExit as exc:  # click ends its command with sys.exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    return 0


def development_gate() -> list[Any]:
    """The access gate of ``streamlit run app.py`` (app.py's ``st.App``) as Starlette middleware, with
    serve's rules: the token of ``$STABSCOPE_TOKEN`` if set (none is made: a development server), and
    the loopback Host names when it listens on loopback only without a token. Streamlit's settings
    (its address and port) are loaded by the time ``streamlit run`` imports app.py."""
    from starlette.middleware import Middleware
    from streamlit import config

    from pages.access_gate import AccessGate, settings_for, use_settings
    from pages.parts.token_gate import expected_token

    token = expected_token()
    loopback_only = not listens_beyond_loopback(str(config.get_option("server.address") or "0.0.0.0"))
    host_names = LOOPBACK_HOST_NAMES if loopback_only and token is None else None
    settings = use_settings(settings_for(int(config.get_option("server.port")), token, host_names=host_names))
    return [Middleware(AccessGate, settings=settings)]


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
    """:func:`streamlit_address_options` as Streamlit's command-line flags."""
    return streamlit_flags(streamlit_address_options(host, exposed=exposed, has_token=has_token))


def streamlit_address_options(host: str, *, exposed: bool, has_token: bool) -> dict[str, Any]:
    """Streamlit's options for listening on ``host``: the bind address; the Host names a loopback-only
    server without a token answers (:data:`LOOPBACK_HOST_NAMES`); and, for one named address beyond
    this machine, the URL Streamlit prints (.streamlit/config.toml names localhost)."""
    options: dict[str, Any] = {"server.address": host}
    if not exposed and not has_token:
        options["server.allowedHosts"] = list(LOOPBACK_HOST_NAMES)
    if exposed and not _is_wildcard(host):
        options["browser.serverAddress"] = host
    return options


def _announce(host: str, port: int, *, exposed: bool, has_token: bool) -> None:
    """On stderr, before anything listens: the URL to open, the address other machines use when the
    server listens on every interface, and a warning when it listens beyond this machine."""
    store = os.environ.get("STABSCOPE_STORE", "")
    shown = "localhost" if not exposed or _is_wildcard(host) else _url_host(host)
    print(f"StabScope on http://{shown}:{port} (store {store})", file=sys.stderr)
    from pages.parts.token_gate import expected_token

    token = expected_token()
    if os.environ.get(GENERATED_TOKEN_ENV) == "1" and token:  # like Jupyter: the address that signs a browser in
        print(
            "  open it with its access token (made for this start; without it, other users of this machine get "
            f"nothing):\n  http://{shown}:{port}/?token={token}",
            file=sys.stderr,
        )
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

    Streamlit treats a folder named pages/ beside the main script as an old-style multipage app until
    the script has called st.navigation once; a deep link (/overview) as the first request of a fresh
    server would then run that page without the app's navigation. :data:`APP` has no such folder beside
    it, and declaring the app navigation-driven before start-up rules the mode out whatever the layout
    (the ``pages`` package also recovers from it, with one extra rerun, under ``streamlit run app.py``).

    The page helpers' libraries (numpy, pandas, DuckDB, the store) are not imported here: imported
    before the server listened, they made serve wait for them and then wait again for the browser. A
    thread imports them when a browser asks for the Runs page, while it loads Streamlit's code, and the
    first page's run waits for that thread before it imports anything (``pages.parts.first_screen_preload``; without
    that wait, importing them on a thread raced the page's own first use of Plotly, whose lazy
    submodules are not safe to load from two threads, so Plotly's figure builders are left out)."""
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False


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
