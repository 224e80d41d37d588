"""Where StabScope keeps its store by default: light on purpose (the CLI resolves it before it starts
anything heavy)."""

from __future__ import annotations

import os
from pathlib import Path


def default_store_path() -> Path:
    """``$STABSCOPE_STORE``, else ``$XDG_DATA_HOME/stabscope/store`` (``~/.local/share/...``)."""
    env = os.environ.get("STABSCOPE_STORE")
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "stabscope" / "store"


def default_store_location() -> str:
    """The default store as a string: an ``s3://`` URL when ``$STABSCOPE_STORE`` names one (a path would
    mangle it), else ``default_store_path()``."""
    env = os.environ.get("STABSCOPE_STORE", "")
    return env if env.startswith("s3://") else str(default_store_path())
