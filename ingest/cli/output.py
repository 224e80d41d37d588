"""What every ``stabscope`` command shares: the store it opens, the terminal output (every control
character made visible, JSON without NaN, progress bars) and the one way an error is reported."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from ingest.errors import EXIT_ERROR, StabScopeError


def cli_store(args: argparse.Namespace) -> Any:
    """The store of ``--store`` (default: ``$STABSCOPE_STORE`` or the embedded one) with the analyses as its
    ``on_generation`` hook, writing with the ``--wait`` of the writing commands."""
    from ingest.services.run_analyses import open_analysed_store

    store = open_analysed_store(args.store)
    if getattr(args, "wait", None) is not None:  # the writing commands' --wait
        store.writer_wait_s = args.wait
    return store


def store_location_arg(store: str, *, resolve: bool = False) -> str | Path:
    """``--store``'s value: an ``s3://`` URL as it is, else a path (``~`` expanded)."""
    if store.startswith("s3://"):
        return store
    path = Path(store).expanduser()
    return path.resolve() if resolve else path


_TERMINAL_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on instead of showing: C0 controls but the newline (ESC starts the
sequences that retitle, clear or recolour a terminal), DEL, C1 controls (0x9b is a one-byte CSI) and
the bidirectional overrides that reorder what is shown."""


def terminal_safe(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every terminal control written as a visible escape (ESC as ``\\x1b``): a log's run
    names, event labels and metric names, and error messages quoting a file, reach the terminal as
    text, never as commands. Newlines are kept where they are the CLI's own line structure."""
    pattern = _TERMINAL_CONTROLS if keep_newlines else _TERMINAL_CONTROLS_AND_NEWLINE
    return pattern.sub(_visible_escape, text)


_TERMINAL_CONTROLS_AND_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""The same and the newline too: for a one-line field (an event label) that must not forge lines."""


def _visible_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def print_safe(*parts: object, file: TextIO | None = None, flush: bool = False) -> None:
    """``print`` for everything the CLI writes to the terminal: each part made :func:`terminal_safe`
    (``--json`` output is safe already: ``json.dumps`` escapes every control character)."""
    print(*(terminal_safe(str(p)) for p in parts), file=file, flush=flush)


@contextmanager
def progress_bar(desc: str, unit: str = "B") -> Iterator[Callable[[int, int], None]]:
    """A tqdm bar on stderr fed by ``progress(done, total)`` callbacks (silent when not a terminal)."""
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit=unit, unit_scale=True, file=sys.stderr, disable=None, leave=False)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def print_json(obj: Any) -> None:
    print(
        json.dumps(obj, indent=2, default=str, allow_nan=False)
        if not _has_nonfinite(obj)
        else json.dumps(_nonfinite_to_str(obj), indent=2, default=str)
    )


def _has_nonfinite(obj: Any) -> bool:
    try:
        json.dumps(obj, allow_nan=False, default=str)
        return False
    except ValueError:
        return True


def _nonfinite_to_str(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan"/"inf"/"-inf" (parsers of scripts can)."""
    if (isinstance(obj, float) and obj != obj) or obj in (float("inf"), float("-inf")):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _nonfinite_to_str(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nonfinite_to_str(v) for v in obj]
    return obj


def reported(command: str, call: Callable[[], int]) -> int:
    """``call()``'s exit status; an error becomes one paragraph on stderr and ``EXIT_ERROR``. Output
    closed early by its reader (``stabscope spikes RUN | head``) ends the command quietly, with status 0."""
    try:
        status = call()
        sys.stdout.flush()  # here, not at exit: a reader gone by now is a closed pipe, handled below
        return status
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except StabScopeError as exc:
        print_safe(f"stabscope {command}: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", EXIT_ERROR))  # 1: another process writes the run (WriterBusy)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the contract: one paragraph, never a traceback (STABSCOPE_DEBUG=1 shows it)
        if os.environ.get("STABSCOPE_DEBUG"):
            raise
        text = " ".join(str(exc).split())
        print_safe(f"stabscope {command}: error: {type(exc).__name__}: {text}", file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null: its reader has gone, and the interpreter's flush at exit would
    otherwise fail again (``Exception ignored ... BrokenPipeError``) on the output still buffered."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
