"""``stab_core`` holds no torch: importing the package and every module in it leaves torch unloaded, and
no source file of it names torch in an import (not even inside a function or under TYPE_CHECKING).

The pages and the analyses import ``stab_core``; torch's import costs seconds and is absent from a
dashboard-only install. The torch schedulers and clippers live in ``ingest.training``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, pkgutil, sys
import stab_core
names = [m.name for m in pkgutil.walk_packages(stab_core.__path__, "stab_core.")]
for name in names:
    importlib.import_module(name)
print(len(names), "torch" in sys.modules, sorted(m for m in sys.modules if m.split(".")[0] == "torch")[:5])
"""


def test_importing_stab_core_and_every_module_in_it_loads_no_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, check=True)
    count, loaded, modules = proc.stdout.split(" ", 2)
    assert int(count) >= 20  # the walk found the package's modules, so the check below means something
    assert loaded == "False", f"importing stab_core loaded {modules.strip()}"


def torch_imports(path: Path) -> list[int]:
    """Lines of ``path`` whose import statement names torch or a torch submodule."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        if any(name.split(".")[0] == "torch" for name in names):
            lines.append(node.lineno)
    return lines


def test_no_stab_core_source_file_imports_torch() -> None:
    sources = sorted((REPO / "stab_core").rglob("*.py"))
    assert len(sources) >= 20
    found = {str(p.relative_to(REPO)): torch_imports(p) for p in sources}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_scan_sees_an_import_inside_a_function_and_under_type_checking(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from torch import nn\n"
        "def f():\n    import torch.distributed as dist\n    import numpy\n"
    )
    assert torch_imports(sample) == [3, 5]
