"""The shared-token gate: a dashboard started with a token (``stabscope serve --token-file PATH``, or
``STABSCOPE_TOKEN`` in the server's environment) shows nothing of the store until a session gives it.

app.py asks before it draws anything else: before the sidebar's page list, the live runs' banners and
the demo seeding. A viewer gives the token once per browser session, in the password field or once in
the address (``?token=...``, taken out of the address as soon as it is read, so that it does not stay
in the history or a shared link). The token is never drawn, logged or echoed back. A wrong token is
logged (the address it came from, never its value) and, after a few in one session, answered later
and later, which slows a script guessing tokens.

Light on purpose, like ``pages.parts.warmup``: app.py imports it before the pages' libraries.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

import streamlit as st
from streamlit.logger import get_logger

TOKEN_ENV = "STABSCOPE_TOKEN"
"""The server's environment variable holding the shared token (unset or blank: no gate)."""
TOKEN_QUERY_PARAM = "token"
"""The query parameter a link may carry the token in (``/?token=...``)."""
_UNLOCKED_KEY = "stabscope_token_unlocked"
_REFUSED_KEY = "stabscope_token_refused"
_FORM_KEY = "stabscope_token_form"
_FAILURES_KEY = "stabscope_token_failures"
MIN_TOKEN_CHARS = 16
"""Shortest token the gate opens with: ``ingest.cli.serve.MIN_TOKEN_CHARS``, which ``stabscope serve`` enforces
(repeated, not imported: this module loads nothing of ingest; a test checks that the two agree)."""
FREE_FAILURES = 3
"""Wrong tokens a session may give before each further one is answered late (a typo costs nothing)."""
FIRST_DELAY_S = 0.5
"""Seconds the answer to the first wrong token past :data:`FREE_FAILURES` waits; it doubles per failure."""
MAX_DELAY_S = 4.0
"""Longest wait (seconds) before answering a wrong token: guessing is slowed, a viewer is not locked out."""
_LOG = get_logger(__name__)


def expected_token() -> str | None:
    """The token this server was started with, or None when it has none (a blank value is none)."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def token_matches(given: str, expected: str) -> bool:
    """Whether ``given`` is the token, compared in constant time. Both sides are hashed first so that
    neither the time taken nor an early length check tells anything about the token's length."""
    digest_given = hashlib.sha256(given.strip().encode()).digest()
    digest_expected = hashlib.sha256(expected.encode()).digest()
    return hmac.compare_digest(digest_given, digest_expected)


def token_problem() -> str | None:
    """Why the server's token cannot be used (too short to resist guessing), or None when it can."""
    expected = expected_token()
    if expected is not None and len(expected) < MIN_TOKEN_CHARS:
        return (
            f"the server's access token (${TOKEN_ENV}) has {len(expected)} character(s); at least "
            f"{MIN_TOKEN_CHARS} are needed, so that it cannot be guessed. Whoever started the server can make "
            "one with: python -c 'import secrets; print(secrets.token_urlsafe(24))' > token.txt && chmod 600 "
            "token.txt, then start it again with `stabscope serve --token-file token.txt`"
        )
    return None


def failure_delay_s(failures: int) -> float:
    """Seconds to wait before answering a session's ``failures``-th wrong token in a row: none for the
    first :data:`FREE_FAILURES`, then :data:`FIRST_DELAY_S` doubling per failure up to :data:`MAX_DELAY_S`."""
    if failures <= FREE_FAILURES:
        return 0.0
    return min(FIRST_DELAY_S * 2.0 ** (failures - FREE_FAILURES - 1), MAX_DELAY_S)


def _refuse(where: str) -> None:
    """Count a wrong token of this session, log it (never its value) and answer it late after
    :data:`FREE_FAILURES`, so that a script guessing tokens over one connection is slowed."""
    failures = int(st.session_state.get(_FAILURES_KEY, 0)) + 1
    st.session_state[_FAILURES_KEY] = failures
    st.session_state[_REFUSED_KEY] = True
    delay = failure_delay_s(failures)
    _LOG.warning(
        "wrong access token (%s) from %s: failure %d of this session%s",
        where,
        _client_address(),
        failures,
        f"; answered after {delay:g} s" if delay else "",
    )
    time.sleep(delay)


def _client_address() -> str:
    """The viewer's address as Streamlit knows it, for the log ("unknown address" where it does not)."""
    try:
        address = st.context.ip_address
    except (AttributeError, RuntimeError):
        address = None
    return str(address) if address else "unknown address"


def session_unlocked() -> bool:
    """Whether this browser session may see the dashboard: no token is set, the session gave it
    already, or the address carries it now. A ``?token=`` is removed from the address either way; a
    wrong one is remembered only as "refused", for :func:`ask_for_token` to say so."""
    expected = expected_token()
    if expected is None:
        return True
    if token_problem() is not None:  # a guessable token opens nothing: ask_for_token says why
        return False
    gate_opened = _signed_in_by_the_gate()
    if gate_opened is not None:  # under stabscope serve: the browser's cookie, not this session, holds the access
        return gate_opened
    if st.session_state.get(_UNLOCKED_KEY):
        return True
    if TOKEN_QUERY_PARAM in st.query_params:
        from_address = st.query_params.get(TOKEN_QUERY_PARAM) or ""
        del st.query_params[TOKEN_QUERY_PARAM]
        if token_matches(from_address, expected):
            st.session_state[_UNLOCKED_KEY] = True
            st.session_state.pop(_FAILURES_KEY, None)
            return True
        _refuse("in the address")
    return False


def _signed_in_by_the_gate() -> bool | None:
    """Whether this session's browser holds the access cookie of ``pages.access_gate``; None where no gate
    runs in this process (AppTest, ``streamlit run app.py``), and the session-held unlock applies."""
    import sys

    gate = sys.modules.get("pages.access_gate")  # imported by the server before it starts, never here
    settings = gate.active_settings() if gate is not None else None
    if gate is None or settings is None or settings.token is None:
        return None
    try:
        cookie = st.context.cookies.get(settings.cookie_name)
    except (AttributeError, RuntimeError):
        cookie = None
    return bool(gate.cookie_valid(settings, cookie))


def ask_for_token() -> None:
    """Draw the token form and stop the script run: nothing after the call draws. A right token
    unlocks the session and reruns into the page the address names; a wrong one is refused with no
    hint of the token and no run data."""
    expected = expected_token()
    if expected is None:
        return
    st.title("StabScope")
    problem = token_problem()
    if problem is not None:
        st.error(f"The dashboard stays closed: {problem}.")
        st.stop()
    if _signed_in_by_the_gate() is False:  # the cookie expired while this page stayed open
        st.warning("Your access to this dashboard has expired: reload the page and enter the access token again.")
        st.stop()
    st.write(
        "This dashboard was started with an access token. Enter it to see the runs; "
        "whoever started `stabscope serve` has it."
    )
    with st.form(_FORM_KEY, clear_on_submit=True):
        given = st.text_input("Access token", type="password", autocomplete="current-password")
        submitted = st.form_submit_button("Open the dashboard", type="primary")
    if submitted:
        if token_matches(given, expected):
            st.session_state[_UNLOCKED_KEY] = True
            st.session_state.pop(_REFUSED_KEY, None)
            st.session_state.pop(_FAILURES_KEY, None)
            st.rerun()
        _refuse("in the form")
    if st.session_state.get(_REFUSED_KEY):
        st.error(
            "That is not this dashboard's access token, so no run is shown. Check it with whoever "
            "started the server (it is the value of STABSCOPE_TOKEN or of the file given to "
            "--token-file) and enter it again."
        )
    st.stop()
