"""Config text -> a raw mapping: YAML, JSON, TOML or a Megatron-LM arguments dump.

Only safe loaders are used (``yaml.safe_load``, ``json``, ``tomllib``, ``ast.literal_eval`` on short
values); input is bounded (``MAX_CONFIG_BYTES``) and nesting/size limits stop alias bombs. Every
failure raises ``StabScopeError`` naming the file and, where the parser reports one, the line.
:func:`megatron_args` is the one parser of Megatron's ``---- arguments ----`` block, for a config
upload (strict) and for the text-log readers (lenient). The mapping onto the checklist's keys is
:mod:`ingest.importing.config_trainers`' and :mod:`ingest.importing.configs`'.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from typing import Any

import yaml

from ingest.errors import StabScopeError
from ingest.formats.raw_text import strip_launcher_prefixes

MAX_CONFIG_BYTES = 2 * 1024 * 1024
"""Largest config accepted (2 MiB); real trainer configs are a few KiB."""


MAX_LEAVES = 20_000
"""Most leaf values a config may hold after YAML aliases are expanded."""


MAX_DEPTH = 32
"""Deepest nesting accepted."""


MAX_LITERAL_CHARS = 10_000
"""Longest value of an arguments dump that is parsed as a Python literal."""


ARGS_START = re.compile(r"^-{3,}\s*arguments\s*-{3,}\s*$", re.MULTILINE)


_ARGS_END = re.compile(r"^-{3,}\s*end of arguments\s*-{3,}\s*$", re.MULTILINE)


_ARGS_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s\.{2,}\s(.*?)\s*$")


_TOML_WHERE = re.compile(r"\(at line (\d+), column \d+\)")


def too_big(size: int) -> str:
    return f"config is {size:,} bytes; the limit is {MAX_CONFIG_BYTES:,} bytes (is this really a config?)"


def decode_config(data: str | bytes, filename: str) -> str:
    size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
    if size > MAX_CONFIG_BYTES:
        raise StabScopeError(too_big(size), path=filename)
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StabScopeError(
            f"not UTF-8 text (byte offset {exc.start}); configs must be YAML, JSON or TOML text",
            path=filename,
            line=line,
        ) from None


def parse_yaml(text: str, filename: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise StabScopeError(f"invalid YAML: {exc.problem or exc}", path=filename, line=line) from None
    except yaml.YAMLError as exc:
        raise StabScopeError(f"invalid YAML: {exc}", path=filename) from None


def parse_json(text: str, filename: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StabScopeError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=filename, line=exc.lineno) from None
    except ValueError as exc:
        raise StabScopeError(f"invalid JSON: {exc}", path=filename) from None


def _reject_constant(name: str) -> float:
    # NaN/Infinity are not JSON; a config holding them is broken, not a number to grade.
    raise ValueError(f"{name} is not a valid JSON value in a config")


def parse_toml(text: str, filename: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        line = int(where.group(1)) if where else None
        raise StabScopeError(
            f"invalid TOML: {_TOML_WHERE.sub('', message).strip()}", path=filename, line=line
        ) from None


SKIPPED_LINES_KEY = "stabscope_skipped_lines"
"""Where :func:`parse_megatron_args_config` puts the log lines it passed over ('line N: text'), for
:func:`ingest.importing.configs.read_run_config` to report (not a setting)."""

_LOG_LINE = re.compile(r"\b(?:WARNING|WARN|INFO|ERROR|DEBUG|CRITICAL)\b|^\s*\[?[WIE]\d{4}\b")
"""Another process's log message written into the block (``WARNING: ...``, ``[W1204 ...]``)."""


def parse_megatron_args_config(text: str, filename: str) -> dict[str, Any]:
    """The ``---- arguments ----`` block of a Megatron-LM log: ``  name ........ value`` per line (a config
    upload). Launcher prefixes (``[default0]:``, ``node017:``) are removed first; a log message
    interleaved in the block (a WARNING line) is passed over and listed under
    :data:`SKIPPED_LINES_KEY`; a line of any other shape, or a block that never ends, is an error with
    file and line."""
    skipped: list[str] = []
    args = megatron_args(text, filename, strict=True, skipped=skipped)
    if skipped:
        args[SKIPPED_LINES_KEY] = skipped
    return args


def megatron_args(
    text: str, filename: str = "<log>", *, strict: bool = False, skipped: list[str] | None = None
) -> dict[str, Any]:
    """The arguments Megatron-LM dumps at start-up (``  name ........ value`` lines between
    ``---- arguments ----`` and ``---- end of arguments ----``), values as Python literals, read through
    launcher prefixes (:func:`ingest.formats._common.strip_launcher_prefixes`: a ``[default0]:`` before
    every line). The one parser of that block, for config uploads (``strict``: a log message line is
    passed over and appended to ``skipped`` as 'line N: text', any other line is an error) and for the
    text log readers (lenient: other lines, e.g. another rank's interleaved output, are passed over; a
    block cut short ends where the text does; no block gives ``{}``)."""
    text = strip_launcher_prefixes(text)
    start = ARGS_START.search(text)
    if start is None:
        if strict:
            raise StabScopeError("no '---- arguments ----' block found (a Megatron-LM start-up log)", path=filename)
        return {}
    end = _ARGS_END.search(text, start.end())
    if end is None and strict:
        header_line = text.count("\n", 0, start.start()) + 1
        raise StabScopeError(
            "the arguments block never ends ('end of arguments' missing)", path=filename, line=header_line
        )
    first_line = text.count("\n", 0, start.end()) + 1
    args: dict[str, Any] = {}
    block = text[start.end() : end.start() if end is not None else len(text)]
    for offset, line in enumerate(block.splitlines()):
        if not line.strip():
            continue
        match = _ARGS_LINE.match(line)
        if match is None:
            if strict and _LOG_LINE.search(line):
                if skipped is not None:
                    skipped.append(f"line {first_line + offset}: {line.strip()[:200]}")
                continue
            if strict:
                raise StabScopeError(
                    f"expected 'name .... value' in the arguments block, found {line.strip()[:80]!r}",
                    path=filename,
                    line=first_line + offset,
                )
            continue
        args[match.group(1)] = literal_value(match.group(2))
    return args


def literal_value(value: str) -> Any:
    """A dumped Python value (None, True, 1e-05, [...], 'text'), else the text itself."""
    if len(value) > MAX_LITERAL_CHARS:
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def check_size(parsed: dict[str, Any], filename: str) -> None:
    """Refuse configs whose expanded size or depth is absurd (YAML alias bombs)."""
    stack: list[tuple[Any, int]] = [(parsed, 0)]
    leaves = 0
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise StabScopeError(f"config nests deeper than {MAX_DEPTH} levels", path=filename)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            leaves += 1
        else:
            for child in children:
                leaves += 1
                if leaves > MAX_LEAVES:
                    raise StabScopeError(f"config holds more than {MAX_LEAVES:,} values", path=filename)
                stack.append((child, depth + 1))
