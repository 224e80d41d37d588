"""``stabscope serve`` (the dashboard's server: its address, token and demo runs) and ``stabscope demo``."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ingest
from ingest.cli.output import (
    cli_store,
    print_safe,
    progress_bar,
    reported,
    store_location_arg,
)
from ingest.errors import StabScopeError


def cmd_demo(args: argparse.Namespace) -> int:
    from ingest.services.demo import seed_demo_store

    store = cli_store(args)
    with progress_bar("demo runs", unit="run") as progress:
        names = seed_demo_store(store, force=True, progress=progress, on_wait=say_demo_wait(), wait_s=args.wait)
    if names:
        print_safe(f"demo runs in {store.location}: {', '.join(names)}", file=sys.stderr)
    else:
        print_safe(f"demo runs in {store.location}: written by another process meanwhile", file=sys.stderr)
    return 0


def say_demo_wait() -> Callable[[Any], None]:
    """An ``on_wait`` for ``seed_demo_store``: one line on stderr, the first time, naming who prepares them."""
    said: list[bool] = []

    def waiting(holder: Any) -> None:
        if not said:
            said.append(True)
            who = f" by {holder.describe()}" if holder is not None else ""
            print_safe(f"the demo runs are being prepared{who}: waiting for them", file=sys.stderr, flush=True)

    return waiting


# `serve` runs app.py's server in this very process (os.execv: same PID, so a `kill` of the command
# stops the server; a child would be left serving as an orphan). The server side lives in
# pages/server.py: ingest never loads Streamlit.
_SERVE_BOOT = (
    "import sys\nsys.path.insert(0, sys.argv.pop(1))\nfrom pages.server import main\n"
    "from ingest.cli.serve import seed_before_serving\n"
    "sys.exit(main(int(sys.argv[1]), sys.argv[2], seed_demo=seed_before_serving))\n"
)
"""The server process's program: the CLI hands the server its demo seeding (pages import no CLI)."""


def cmd_serve(args: argparse.Namespace) -> int:
    """Replace this process with the dashboard's server (pages/server.py) on the chosen store."""
    from ingest.store.paths import default_store_location

    # the folder holding the ingest and pages packages: the source tree, or site-packages for a wheel
    root = Path(ingest.__file__).resolve().parents[1]
    missing = [name for name in ("navigation.py", "server.py") if not (root / "pages" / name).is_file()]
    if missing:
        raise StabScopeError(
            f"cannot find the app in {root / 'pages'} (missing {', '.join(missing)}): the dashboard's pages "
            "package is not installed beside ingest. Reinstall StabScope: pip install . (or the wheel)"
        )
    store = store_location_arg(args.store or default_store_location(), resolve=True)
    os.environ["STABSCOPE_STORE"] = str(store)
    if args.no_demo:
        os.environ["STABSCOPE_NO_DEMO"] = "1"
    host = args.host.strip().removeprefix("[").removesuffix("]")
    _check_listen_address(host)
    token = None if args.no_token else _serve_token(args)
    os.environ.pop(GENERATED_TOKEN_ENV, None)
    if token is None and not args.no_token:
        # private by default, as Jupyter: loopback is shared by every user of a login node
        token = secrets.token_urlsafe(24)
        os.environ[GENERATED_TOKEN_ENV] = "1"
    if token is None:
        print_safe(
            "stabscope serve: warning: --no-token: every user of this machine (and of any machine that reaches "
            "--host) can read, upload and delete the runs of this store. Leave --no-token out for a token made "
            "at each start.",
            file=sys.stderr,
        )
        os.environ.pop(SERVE_TOKEN_ENV, None)
    else:  # the server reads it from its environment, which other users cannot read (unlike its argv)
        os.environ[SERVE_TOKEN_ENV] = token
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-c", _SERVE_BOOT, str(root), str(args.port), host])
    except OSError as exc:
        raise StabScopeError(f"cannot start the server ({sys.executable}): {exc}") from exc
    return 0  # not reached: execv does not return


SERVE_TOKEN_ENV = "STABSCOPE_TOKEN"
"""The environment variable holding the dashboard's shared access token (pages.parts.token_gate reads it)."""


GENERATED_TOKEN_ENV = "STABSCOPE_TOKEN_GENERATED"
"""Set to 1 when serve made the token itself (``pages.server.GENERATED_TOKEN_ENV``: it then prints the
address carrying it; repeated, not imported: ingest loads nothing of pages)."""


def _serve_token(args: argparse.Namespace) -> str | None:
    """The access token from --token, --token-file or $STABSCOPE_TOKEN, in that order; None when none is
    given. Surrounding whitespace (a file's final newline) is not part of it."""
    if args.token_file is not None:
        path = Path(args.token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StabScopeError(
                f"cannot read the access token from {path} (--token-file): {exc}. Give a readable UTF-8 "
                "text file holding the token on its own, e.g. made with: python -c 'import secrets; "
                f"print(secrets.token_urlsafe(24))' > {path} && chmod 600 {path}"
            ) from exc
        if not token:
            raise StabScopeError(f"the access token file {path} (--token-file) is empty: write the token in it")
        if path.stat().st_mode & 0o077:
            print_safe(
                f"stabscope serve: note: other users of this machine can read {path} (chmod 600 it)", file=sys.stderr
            )
        return _long_enough(token, f"the token in {path} (--token-file)")
    if args.token is not None:
        if not args.token.strip():
            raise StabScopeError("--token is empty: give the token, or leave --token out for no token")
        return _long_enough(str(args.token).strip(), "--token")
    token = os.environ.get(SERVE_TOKEN_ENV, "").strip()
    return _long_enough(token, f"${SERVE_TOKEN_ENV}") if token else None


MIN_TOKEN_CHARS = 16
"""Shortest access token accepted: a short one is guessed (the gate slows, not stops, guessing)."""


def _long_enough(token: str, where: str) -> str:
    """``token`` when it has at least :data:`MIN_TOKEN_CHARS` characters, else a refusal saying how to make one."""
    if len(token) < MIN_TOKEN_CHARS:
        raise StabScopeError(token_too_short(where, len(token)))
    return token


def token_too_short(where: str, length: int) -> str:
    """The one paragraph refusing a token of ``length`` characters given in ``where`` (the gate says it too)."""
    return (
        f"the access token in {where} has {length} character(s); at least {MIN_TOKEN_CHARS} are needed, so that "
        "it cannot be guessed. Make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))' "
        "> token.txt && chmod 600 token.txt, then start with --token-file token.txt (or STABSCOPE_TOKEN)"
    )


def _check_listen_address(host: str) -> None:
    """Refuse, before the server starts, a --host the server could not listen on: a name that does not
    resolve or an address that is not this machine's. Binds port 0 of it as Streamlit will bind it (an
    address with a colon as IPv6, anything else as IPv4)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StabScopeError(
            f"cannot listen on --host {host!r}: {reason}. Give an address of this machine: 127.0.0.1 "
            "(this machine only, the default), one of its network addresses, or 0.0.0.0 (every interface)"
        ) from exc


def seed_before_serving() -> int:
    """In the server process, before it listens: write the demo runs on a first start, with a
    terminal progress bar, so the first page the browser opens is instant. Returns the exit status
    (errors reported as the CLI does)."""

    def seed() -> int:
        from ingest.services.demo import DEMO_SEEDED_KEY, seed_demo_store
        from ingest.store import Store

        # a store seeded before (every start but the first) is told by one setting, without loading the
        # analyses that seeding needs
        if Store(os.environ["STABSCOPE_STORE"]).get_setting(DEMO_SEEDED_KEY):
            return 0
        from ingest.services.run_analyses import open_analysed_store

        with progress_bar("first start: demo runs", unit="run") as progress:
            store = open_analysed_store(os.environ["STABSCOPE_STORE"])
            seed_demo_store(store, progress=progress, on_wait=say_demo_wait())
        return 0

    return reported("serve", seed)
