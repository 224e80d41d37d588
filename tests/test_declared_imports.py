"""Every third-party import the tree makes is declared in pyproject.toml where a fresh machine gets it.

CI runs in a virtual environment it creates for the run (.ci/test), so an undeclared import fails there
as it would for a newcomer; this test says which import and which file at once, and also catches an
import that only a code path the suite does not run would reach. The rules:

- the app and library packages' module-level imports (loaded by ``stabscope`` and the dashboard) come
  from ``[project].dependencies``;
- every import anywhere (lazy ones, tests, bench) comes from the dependencies or the ``test`` extra,
  which the test command installs (mypy reads every module, so it needs them all);
- and each is installed here, where the test command has just installed the project.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO_ROOT

RUNTIME_ROOTS = ("stab_core", "ingest", "pages", "app.py")
"""What ``pip install .`` serves: their module-level imports need the core dependencies."""
SKIPPED_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}


def requirement_name(requirement: str) -> str:
    """A requirement's distribution name, normalised (``moto[server]>=5`` -> ``moto``)."""
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def declared() -> tuple[set[str], set[str]]:
    """The core dependencies, and those with the ``test`` extra and the build requirements added."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    core = {requirement_name(r) for r in project["project"]["dependencies"]}
    test = {requirement_name(r) for r in project["project"]["optional-dependencies"]["test"]}
    build = {requirement_name(r) for r in project["build-system"]["requires"]}
    return core, core | test | build


def local_names() -> set[str]:
    """Top-level names the repository itself provides (its packages and modules)."""
    return {p.stem if p.suffix == ".py" else p.name for p in REPO_ROOT.iterdir() if p.is_dir() or p.suffix == ".py"}


def python_files() -> list[Path]:
    found = []
    for path in REPO_ROOT.rglob("*.py"):
        parts = path.relative_to(REPO_ROOT).parts
        if not any(part in SKIPPED_DIRS or "venv" in part for part in parts[:-1]):
            found.append(path)
    return sorted(found)


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(top-level module, line, at module level)`` for each absolute import in ``path``; an import in
    a function, or in a ``try`` that handles its absence, is not at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], child.lineno, top_level) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], child.lineno, top_level))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try) or _is_type_checking(child):
                visit(child, False)
            else:
                visit(child, top_level)

    visit(tree, True)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    """Is ``node`` an ``if TYPE_CHECKING:`` block (imports for the type checker alone)?"""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def undeclared(files: list[Path], root: Path = REPO_ROOT) -> list[str]:
    """One line per import in ``files`` (under ``root``) that breaks the module docstring's rules."""
    core, installable = declared()
    local = local_names()
    providers = importlib.metadata.packages_distributions()
    problems = []
    for path in files:
        rel = path.relative_to(root)
        runtime = rel.parts[0] in RUNTIME_ROOTS
        for module, line, top_level in imports(path):
            if module in sys.stdlib_module_names or module in local or module.startswith("_"):
                continue
            where = f"{rel}:{line}: imports {module!r}"
            dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
            if importlib.util.find_spec(module) is None or not dists:
                problems.append(f"{where}, which nothing installed here provides (declare its distribution)")
            elif not dists & installable:
                problems.append(f"{where} ({'/'.join(sorted(dists))}): not in the dependencies or the test extra")
            elif runtime and top_level and not dists & core:
                problems.append(f"{where} ({'/'.join(sorted(dists))}) at module level: not a core dependency")
    return problems


def test_every_import_is_declared_where_a_fresh_machine_gets_it() -> None:
    assert undeclared(python_files()) == []


def test_the_rules_catch_an_undeclared_import(tmp_path: Path) -> None:
    """The checker itself: in a runtime package, a module-level import of a package only the test extra
    declares, and a lazy import that nothing provides, are reported; a lazy one of the test extra and a
    core dependency at module level are not."""
    core, installable = declared()
    assert "matplotlib" in installable - core  # the test extra has it, the dependencies do not
    sample = tmp_path / "ingest" / "sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "import matplotlib\nimport numpy\n\ndef later():\n    import no_such_module_xyz\n    import matplotlib\n"
    )
    assert imports(sample) == [
        ("matplotlib", 1, True),
        ("numpy", 2, True),
        ("no_such_module_xyz", 5, False),
        ("matplotlib", 6, False),
    ]
    problems = undeclared([sample], root=tmp_path)
    assert [p.split(":")[1] for p in problems] == ["1", "5"], problems
    assert "not a core dependency" in problems[0] and "nothing installed here provides" in problems[1]
