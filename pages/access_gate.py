"""The access gate in front of every route of ``stabscope serve`` (issue #33 items 1-5).

An ASGI middleware installed on Streamlit's Starlette application when the server starts, before it
listens (:func:`install`): nothing of Streamlit -- the WebSocket (so no message, ``clear_cache``
included, reaches a session), uploads, ``/_stcore/metrics``, media, components, static files -- is
reached until the request carries this server's access cookie. Only the health check stays open.

The token is given once per browser, not per session: ``/any/path?token=...`` or the gate's own sign-in
form (``POST`` :data:`SIGN_IN_PATH`) answers with a signed, expiring cookie (HMAC-SHA256 with a secret
drawn at each server start; HttpOnly, SameSite=Strict) and a redirect to the same address without the
token. A Streamlit session id alone therefore opens nothing: the WebSocket that would resume it is
refused without the cookie. Wrong tokens are logged (the address they came from, never their value) and
answered later and later per address (``pages.parts.token_gate.failure_delay_s``).

The Host check (no DNS rebinding) is here too: a server listening on loopback only answers only the
loopback names, on every route.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import html
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from streamlit.logger import get_logger

from pages.parts import first_screen_preload
from pages.parts.token_gate import TOKEN_QUERY_PARAM, failure_delay_s, token_matches

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SIGN_IN_PATH = "/_stabscope/sign-in"
"""Where the gate's sign-in form posts the token (the only route of the gate's own)."""
OPEN_PATHS = frozenset({"/_stcore/health", "/healthz"})
"""Routes answered without the token: the health check says only "ok" (supervisors and tests poll it)."""
APP_INTERNAL_PREFIXES = ("/_stcore/", "/media/", "/component/", "/static/", "/app/static/", "/_stabscope/")
"""Routes the app's own page calls, not an address a person opens: refused in one line, no sign-in form."""
COOKIE_MAX_AGE_S = 7 * 24 * 3600
"""How long (seconds) a browser stays signed in: a week, then the token is asked again."""
MAX_SIGN_IN_BYTES = 4096
"""Largest sign-in form body read (bytes): a token and a return address, nothing more."""
MAX_TRACKED_ADDRESSES = 10_000
"""Client addresses whose wrong tokens are counted at once; past it the counts start again (bounded memory)."""
_LOG = get_logger(__name__)


@dataclass
class GateSettings:
    """What the gate of one server checks.

    ``token``: the access token, or None for no token (only the Host check then). ``allowed_hosts``:
    the Host names answered (lower case, no port), or None for any (a server listening beyond loopback,
    whose names are the user's). ``cookie_name`` carries the port: cookies are not kept per port, and
    two servers on one machine must not overwrite each other's. ``secret`` signs the cookies: drawn
    anew at each start, so a restart signs every browser out."""

    token: str | None
    allowed_hosts: frozenset[str] | None
    cookie_name: str
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    max_age_s: int = COOKIE_MAX_AGE_S
    failures: dict[str, int] = field(default_factory=dict, repr=False)
    queues: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)


def settings_for(port: int, token: str | None, *, host_names: tuple[str, ...] | None) -> GateSettings:
    """The gate of a server on ``port``: ``token`` (None: none), and the Host names it answers (None:
    any)."""
    hosts = frozenset(name.lower() for name in host_names) if host_names is not None else None
    return GateSettings(token=token, allowed_hosts=hosts, cookie_name=f"stabscope_access_{port}")


def signed_cookie(settings: GateSettings, now: float | None = None) -> str:
    """A cookie value valid for :attr:`GateSettings.max_age_s` seconds from ``now`` (UNIX seconds):
    ``EXPIRY.SIGNATURE``."""
    expires = int((time.time() if now is None else now) + settings.max_age_s)
    return f"{expires}.{_signature(settings, expires)}"


def cookie_valid(settings: GateSettings, value: str | None, now: float | None = None) -> bool:
    """Whether ``value`` is a cookie this server signed and that has not expired."""
    if not value or value.count(".") != 1:
        return False
    expires_text, signature = value.split(".")
    if not expires_text.isdigit():
        return False
    expires = int(expires_text)
    if not hmac.compare_digest(signature.encode(), _signature(settings, expires).encode()):
        return False
    return expires > (time.time() if now is None else now)


def _signature(settings: GateSettings, expires: int) -> str:
    message = f"{settings.cookie_name}|{expires}".encode()
    return hmac.new(settings.secret, message, hashlib.sha256).hexdigest()


_ACTIVE: GateSettings | None = None


def active_settings() -> GateSettings | None:
    """The gate installed in this process (the app's script checks its cookie too), or None."""
    return _ACTIVE


def use_settings(settings: GateSettings) -> GateSettings:
    """Make ``settings`` this process's gate (:func:`active_settings`), for a gate put in place by the
    caller (app.py's ``st.App`` under ``streamlit run``); returns them."""
    global _ACTIVE
    _ACTIVE = settings
    return settings


def install(settings: GateSettings) -> None:
    """Put the gate in front of the Starlette application Streamlit builds when its server starts.

    Called before ``streamlit run`` starts the server. Fails closed: raises RuntimeError naming the
    installed Streamlit when its server no longer builds the application where the gate expects it
    (the server must then not start)."""
    global _ACTIVE
    import streamlit
    from streamlit.web.server.starlette import starlette_server

    build = getattr(starlette_server, "create_starlette_app", None)
    if build is None:
        raise RuntimeError(
            f"stabscope serve: cannot put the access gate in front of Streamlit {streamlit.__version__}: its "
            "server has no create_starlette_app any more. Install the Streamlit version pyproject.toml names."
        )
    original = getattr(build, "__wrapped__", build)

    @functools.wraps(original)
    def gated(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        app.add_middleware(AccessGate, settings=settings)
        return app

    starlette_server.create_starlette_app = gated  # type: ignore[attr-defined]
    _ACTIVE = settings


class AccessGate:
    """The ASGI middleware: Host check, then the cookie (or the token, once) before anything else."""

    def __init__(self, app: ASGIApp, settings: GateSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not host_allowed(self.settings, headers.get("host")):
            await _refuse(scope, receive, send, "this server answers only its loopback names (localhost, 127.0.0.1)")
            return
        path = str(scope.get("path", "/"))
        if self.settings.token is None or path in OPEN_PATHS:
            _note_page(scope, path)
            await self.app(scope, receive, send)
            return
        if cookie_valid(self.settings, _cookies(headers).get(self.settings.cookie_name)):
            _note_page(scope, path)
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await _refuse(scope, receive, send, "sign in first")
            return
        if path == SIGN_IN_PATH and scope.get("method") == "POST":
            await self._sign_in_form(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for name, value in query if name == TOKEN_QUERY_PARAM]
        if given:
            rest = urlencode([(name, value) for name, value in query if name != TOKEN_QUERY_PARAM])
            target = path + (f"?{rest}" if rest else "")
            await self._check(scope, send, given[-1], target, "in the address")
            return
        if scope.get("method") == "GET" and not path.startswith(APP_INTERNAL_PREFIXES):
            await _send_page(send, 403, _sign_in_page(_return_address(scope), wrong=False))
            return
        await _send_text(send, 403, "403: give this dashboard's access token first (open / in a browser)")

    async def _sign_in_form(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if len(body) > MAX_SIGN_IN_BYTES:
                await _send_text(send, 413, f"the sign-in form is over {MAX_SIGN_IN_BYTES} bytes")
                return
            if not message.get("more_body"):
                break
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        target = _safe_target(form.get("next", "/"))
        await self._check(scope, send, form.get(TOKEN_QUERY_PARAM, ""), target, "in the form")

    async def _check(self, scope: Scope, send: Send, given: str, target: str, where: str) -> None:
        """Answer a token: the cookie and a redirect to ``target`` when right; when wrong, a log line,
        a delay growing with the address's failures, and the sign-in page again."""
        assert self.settings.token is not None
        address = _client(scope)
        failures = self.settings.failures
        if token_matches(given, self.settings.token):
            failures.pop(address, None)
            cookie = (
                f"{self.settings.cookie_name}={signed_cookie(self.settings)}; Max-Age={self.settings.max_age_s}; "
                "Path=/; HttpOnly; SameSite=Strict"
            )
            location = target.encode("latin-1", "replace")
            headers = [(b"location", location), (b"set-cookie", cookie.encode()), (b"cache-control", b"no-store")]
            await _send(send, 303, headers, b"")
            return
        if len(failures) >= MAX_TRACKED_ADDRESSES and address not in failures:
            failures.clear()
            self.settings.queues.clear()
        # one wrong token of an address at a time: guesses sent in parallel wait their turn, so they are
        # slowed as much as guesses sent one after the other
        async with self.settings.queues.setdefault(address, asyncio.Lock()):
            failures[address] = failures.get(address, 0) + 1
            delay = failure_delay_s(failures[address])
            _LOG.warning(
                "wrong access token (%s) from %s: failure %d from this address%s",
                where,
                address,
                failures[address],
                f"; answered after {delay:g} s" if delay else "",
            )
            await asyncio.sleep(delay)
        await _send_page(send, 403, _sign_in_page(_safe_target(target), wrong=True))


def _note_page(scope: Scope, path: str) -> None:
    """Tell the first-screen preload which page a browser opens (a page's address let through: not the
    health check, not the app's own routes)."""
    if scope.get("type") != "http" or scope.get("method") != "GET" or path in OPEN_PATHS:
        return
    if not path.startswith(APP_INTERNAL_PREFIXES):
        first_screen_preload.page_requested(path)


def host_allowed(settings: GateSettings, host: str | None) -> bool:
    """Whether a request with this Host header is answered: any when the server has no allow-list;
    else its name (port, case and a final dot aside) must be one of :attr:`GateSettings.allowed_hosts`."""
    if settings.allowed_hosts is None:
        return True
    if not host:
        return False
    try:
        name = urlsplit(f"//{host}").hostname
    except ValueError:
        return False
    return name is not None and name.rstrip(".") in settings.allowed_hosts


def _headers(scope: Scope) -> dict[str, str]:
    return {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers", [])}


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    cookies: dict[str, str] = {}
    for part in headers.get("cookie", "").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            cookies.setdefault(name, value)
    return cookies


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown address"


def _return_address(scope: Scope) -> str:
    query = scope.get("query_string", b"").decode("latin-1")
    return _safe_target(str(scope.get("path", "/")) + (f"?{query}" if query else ""))


def _safe_target(target: str) -> str:
    """``target`` when it is a path of this server, else ``/``: a sign-in never redirects elsewhere."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or "\r" in target or "\n" in target:
        return "/"
    return target


async def _refuse(scope: Scope, receive: Receive, send: Send, why: str) -> None:
    """403, before anything is read of the request's body: an HTTP answer, or a WebSocket handshake
    refused (the server answers it with HTTP 403)."""
    if scope["type"] == "websocket":
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": 1008, "reason": why})
        return
    await _send_text(send, 403, f"403: {why}")


async def _send_text(send: Send, status: int, text: str) -> None:
    await _send(send, status, [(b"content-type", b"text/plain; charset=utf-8")], text.encode() + b"\n")


async def _send_page(send: Send, status: int, page: str) -> None:
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        # the page runs no script and loads nothing; its form posts only here
        (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"),
    ]
    await _send(send, status, headers, page.encode())


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode()), (b"x-frame-options", b"DENY")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


SIGN_IN_TITLE = "StabScope: access token"
WRONG_TOKEN = "That is not this dashboard's access token"
"""What the sign-in page says after a wrong token (no hint of the token)."""


def _sign_in_page(target: str, *, wrong: bool) -> str:
    """The gate's sign-in page: self-contained (no script, no asset of the app before the token)."""
    error = f'<p role="alert" class="error">{WRONG_TOKEN}: check it with whoever started the server.</p>'
    error = error if wrong else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{SIGN_IN_TITLE}</title>
<style>body{{font-family:sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}}
input,button{{font-size:1rem;padding:.4rem}} .error{{color:#b00020}}</style></head>
<body><h1>StabScope</h1>
<p>This dashboard was started with an access token. Enter it to see the runs; whoever started
<code>stabscope serve</code> has it (it is in the address the server printed at start).</p>
{error}<form method="post" action="{SIGN_IN_PATH}">
<label for="token">Access token</label><br>
<input id="token" name="{TOKEN_QUERY_PARAM}" type="password" autocomplete="current-password" autofocus required>
<input type="hidden" name="next" value="{html.escape(target, quote=True)}">
<button type="submit">Open the dashboard</button></form></body></html>
"""
