"""The one error type users see: a message fit for stderr or a UI banner, never a traceback."""

from __future__ import annotations

EXIT_ERROR = 2
"""The exit status of a command that failed with an error (``stabscope``, and serve's server process);
1 is kept for "another process writes the run" (``ingest.store.run_lock.WriterBusy``)."""


class StabScopeError(Exception):
    """A user-facing failure with a specific message (file, line/offset, what was expected)."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, page: str | None = None
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.page_message = where + page if page is not None else None
        """The same failure in the dashboard's words (``message`` may name a CLI flag)."""


class ReaderFailed(StabScopeError):
    """A reader raised something it did not mean to (a bug, not bad input): shown like any error, with
    the file named, while scorers and tests can still tell it from a refusal (``__cause__`` holds it)."""
