"""The shared-token gate: a dashboard started with a token (``stabscope serve --token-file PATH``, or
``STABSCOPE_TOKEN`` in the server's environment) shows nothing of the store until a session gives it.

app.py asks before it draws anything else: before the sidebar's page list, the live runs' banners and
the demo seeding. A viewer gives the token once per browser session, in the password field or once in
the address (``?token=...``, taken out of the address as soon as it is read, so that it does not stay
in the history or a shared link). The token is never drawn, logged or echoed back.

Light on purpose, like ``pages.warmup``: app.py imports it before the pages' libraries.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import streamlit as st

TOKEN_ENV = "STABSCOPE_TOKEN"
"""The server's environment variable holding the shared token (unset or blank: no gate)."""
TOKEN_QUERY_PARAM = "token"
"""The query parameter a link may carry the token in (``/?token=...``)."""
_UNLOCKED_KEY = "stabscope_token_unlocked"
_REFUSED_KEY = "stabscope_token_refused"
_FORM_KEY = "stabscope_token_form"


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


def session_unlocked() -> bool:
    """Whether this browser session may see the dashboard: no token is set, the session gave it
    already, or the address carries it now. A ``?token=`` is removed from the address either way; a
    wrong one is remembered only as "refused", for :func:`ask_for_token` to say so."""
    expected = expected_token()
    if expected is None or st.session_state.get(_UNLOCKED_KEY):
        return True
    if TOKEN_QUERY_PARAM in st.query_params:
        from_address = st.query_params.get(TOKEN_QUERY_PARAM) or ""
        del st.query_params[TOKEN_QUERY_PARAM]
        if token_matches(from_address, expected):
            st.session_state[_UNLOCKED_KEY] = True
            return True
        st.session_state[_REFUSED_KEY] = True
    return False


def ask_for_token() -> None:
    """Draw the token form and stop the script run: nothing after the call draws. A right token
    unlocks the session and reruns into the page the address names; a wrong one is refused with no
    hint of the token and no run data."""
    expected = expected_token()
    if expected is None:
        return
    st.title("StabScope")
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
            st.rerun()
        st.session_state[_REFUSED_KEY] = True
    if st.session_state.get(_REFUSED_KEY):
        st.error(
            "That is not this dashboard's access token, so no run is shown. Check it with whoever "
            "started the server (it is the value of STABSCOPE_TOKEN or of the file given to "
            "--token-file) and enter it again."
        )
    st.stop()
