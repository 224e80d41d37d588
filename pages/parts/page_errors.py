"""Where a page's errors are drawn: one banner for a ``StabScopeError``, never a traceback.

app.py runs the page (and its own banners) inside ``errors_shown``; a fragment is a run of its own
(Streamlit catches what it raises before app.py could), so the pages declare theirs with
``page_fragment``, which puts its body inside the same guard. A page catches a ``StabScopeError``
itself only where it recovers and goes on (a bad config beside good logs, one metric mapping refused)
and then draws it with ``show_error``.

Any other exception is a bug: Streamlit logs its traceback on the server and, with
``client.showErrorDetails = "none"`` (.streamlit/config.toml), shows the browser a short notice
without the message or the traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import ParamSpec

import streamlit as st

from ingest.errors import StabScopeError

Params = ParamSpec("Params")
ERROR_ICON = ":material/error:"


def show_error(exc: Exception) -> None:
    """A user-facing error banner (never a traceback), in the page's words where the error has them
    (``StabScopeError.page_message``: "the Format box" rather than the CLI's ``--format NAME``); the
    file and line when the error names them."""
    st.error(getattr(exc, "page_message", None) or str(exc), icon=ERROR_ICON)


@contextmanager
def errors_shown() -> Iterator[None]:
    """Run the body; a ``StabScopeError`` it raises ends it and is drawn as ``show_error``'s banner."""
    try:
        yield
    except StabScopeError as exc:
        show_error(exc)


def page_fragment(
    *, run_every: float | timedelta | None = None
) -> Callable[[Callable[Params, None]], Callable[Params, None]]:
    """``st.fragment(run_every=...)`` whose body runs inside ``errors_shown`` (a fragment's own rerun
    never passes through app.py)."""

    def decorate(body: Callable[Params, None]) -> Callable[Params, None]:
        @functools.wraps(body)  # the fragment's identity is the page function's name, as before
        def guarded(*args: Params.args, **kwargs: Params.kwargs) -> None:
            with errors_shown():
                body(*args, **kwargs)

        fragment: Callable[Params, None] = st.fragment(guarded, run_every=run_every)
        return fragment

    return decorate
