"""Errors in the app (AppTest of app.py): a ``StabScopeError`` a page does not recover from is one banner
drawn by app.py's guard (pages.parts.page_errors), in a fragment too; any other exception shows no traceback
and no message in the browser."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.errors import StabScopeError
from ingest.store import Store
from tests.app_pages import open_in_app

SECRET = "/home/alice/secret-path"


def _raise(exc: Exception) -> Any:
    def raising(*args: object, **kwargs: object) -> None:
        raise exc

    return raising


def test_a_page_error_is_one_banner_with_the_file_and_line(app_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from pages.parts import scheduler_code

    error = StabScopeError("expected a number >= 0 for max_norm", path="run.yaml", line=3)
    monkeypatch.setattr(scheduler_code, "scheduler_snippet", _raise(error))
    at = open_in_app("scheduler", monkeypatch).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["run.yaml, line 3: expected a number >= 0 for max_norm"]
    assert at.error[0].icon == ":material/error:"
    assert at.title[0].value == "Scheduler" and at.get("plotly_chart")  # what the page drew before it stays


def test_the_page_words_of_an_error_are_shown(app_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from pages.parts import scheduler_code

    error = StabScopeError("pass --format NAME", path="a.log", page="choose the format in the Format box")
    monkeypatch.setattr(scheduler_code, "scheduler_snippet", _raise(error))
    at = open_in_app("scheduler", monkeypatch).run()
    assert [e.value for e in at.error] == ["a.log: choose the format in the Format box"]


def test_an_error_in_a_fragment_is_drawn_the_same_way(app_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Runs table is a fragment (it refreshes alone while a run is live): app.py's guard never sees
    its errors, so the fragment carries the same guard."""
    from pages.parts import run_catalog

    monkeypatch.setattr(run_catalog, "run_catalog", _raise(StabScopeError("unreadable", path="catalog.duckdb")))
    at = open_in_app("runs", monkeypatch).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["catalog.duckdb: unreadable"]
    assert at.title[0].value == "Runs" and at.text_input(key="runs_search")  # the page around it is drawn


def test_an_unexpected_error_shows_neither_its_message_nor_a_traceback(
    app_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug is left to Streamlit: with ``client.showErrorDetails = "none"`` the browser gets a notice
    without the message (which may hold paths or data) and without the stack; the server logs both."""
    from pages.parts import scheduler_code

    monkeypatch.setattr(scheduler_code, "scheduler_snippet", _raise(RuntimeError(f"bug near {SECRET}")))
    at = open_in_app("scheduler", monkeypatch).run()
    assert not at.error
    [notice] = at.exception
    assert SECRET not in notice.message and "RuntimeError" not in notice.message
    assert "encountered an error" in notice.message
    assert not list(notice.stack_trace)
