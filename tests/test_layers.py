"""The dependency contracts of docs/architecture.md ("Dependency directions"), checked on the source.

Every ``import`` and ``from ... import`` of the project's packages is read with ``ast`` (those inside
functions and ``TYPE_CHECKING`` blocks too: a lazy import is still a dependency), and each module is
held to the rules of the layer it is in. A rule names what a layer may NOT import, so a new module in a
permitted direction needs no edit here. No import circle among the modules either.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("stab_core", "ingest", "pages", "bench")


@dataclass(frozen=True)
class Rule:
    """Modules under any of ``layers`` (dotted prefixes) import none of ``forbidden`` (dotted prefixes of
    project modules or third-party top-level names), except modules under ``unless``."""

    layers: tuple[str, ...]
    forbidden: tuple[str, ...]
    why: str
    unless: tuple[str, ...] = ()


ABOVE_THE_STORE = ("ingest.services", "ingest.importing", "ingest.live", "ingest.cli", "ingest.training")
APPS = ("pages", "bench")

RULES: tuple[Rule, ...] = (
    Rule(
        ("stab_core",),
        ("ingest", "pages", "bench", "torch", "streamlit", "duckdb", "pyarrow"),
        "stab_core is the pure core: numpy in, numbers out",
    ),
    Rule(
        ("ingest.formats",),
        ("ingest.store", *ABOVE_THE_STORE, *APPS),
        "the readers turn files into long tables; they know no store and no orchestration",
    ),
    Rule(
        ("ingest.store",),
        ("ingest.store.engines", *ABOVE_THE_STORE, *APPS),
        "the store keeps runs; it is given its hook (analyses) and its engine (Spark), it imports neither",
        unless=("ingest.store.engines",),
    ),
    Rule(
        ("ingest.store.engines",),
        (*ABOVE_THE_STORE, *APPS),
        "an engine reads shards for the store and sits on it, below everything else",
    ),
    Rule(
        ("ingest.services",),
        ("ingest.importing", "ingest.live", "ingest.cli", "ingest.training", *APPS),
        "run services compute on stored runs: services -> store",
    ),
    Rule(
        ("ingest.importing",),
        ("ingest.services", "ingest.live", "ingest.cli", "ingest.training", *APPS),
        "import orchestration: formats in, store out",
    ),
    Rule(("ingest.live",), ("ingest.cli", "ingest.training", *APPS), "following a job builds on importing and store"),
    Rule(("ingest.training",), ("ingest.cli", "ingest.live", *APPS), "the training side writes shards"),
    Rule(
        ("ingest.errors", "ingest.long_schema"),
        ("ingest.store", *ABOVE_THE_STORE, "ingest.formats", *APPS),
        "shared by every layer, so below them all",
    ),
    Rule(("ingest",), APPS, "ingest is below the pages and the benchmark"),
    Rule(("pages",), ("ingest.live", "bench"), "pages -> services/importing -> store"),
    Rule(
        ("pages.parts",),
        tuple(f"pages.{name}" for name in ("runs", "upload", "overview", "compare", "ranks", "spikes", "tree"))
        + tuple(f"pages.{name}" for name in ("scheduler", "cost", "checklist", "scenarios", "navigation", "server")),
        "the page helpers serve the page scripts, never the other way",
    ),
    Rule(
        PACKAGES,
        ("ingest.cli",),
        "the CLI is the top: only python -m ingest starts it",
        unless=("ingest.cli", "ingest.__main__"),
    ),
)

ALLOWED: dict[tuple[str, str], str] = {}
"""Known breaks of a rule, each with the work that removes it. An entry whose import is gone fails
``test_no_stale_exceptions``, so the list only shrinks."""


def _modules(root: Path = REPO) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports (``from a import b``: ``a`` and ``a.b``), relative ones resolved."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@functools.cache
def _parsed_graph(root: Path) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((module, frozenset(_imports(module, path))) for module, path in _modules(root).items())


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """{module: the names it imports}, for every module of the project's packages under ``root`` (a
    fresh dict each call: the tests plant imports in it)."""
    return {module: set(names) for module, names in _parsed_graph(root)}


def violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per module and rule it breaks (imports in ``ALLOWED`` aside): who, what, and why the rule is."""
    found = []
    for module, names in sorted(graph.items()):
        for rule in RULES:
            if not _under(module, rule.layers) or _under(module, rule.unless):
                continue
            hits = set()
            for name in names:
                hit = next((f for f in rule.forbidden if _under(name, (f,))), None)
                if hit is not None and (module, hit) not in ALLOWED and not _under(name, (module,)):
                    hits.add(name)
            shortest = sorted(n for n in hits if not any(n.startswith(h + ".") for h in hits))  # a, not a.b too
            if shortest:
                found.append(f"{module} imports {', '.join(shortest)}: {rule.why}")
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), over project modules."""
    modules = set(graph)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: set() for m in modules}
    for module, names in graph.items():
        for name in names:
            target = resolve(name)
            # a package's own submodules importing it, or it importing them, is how packages work
            if target and target != module and not module.startswith(target + "."):
                edges[module].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return circles


def test_every_dependency_goes_the_way_the_contracts_say() -> None:
    assert violations(import_graph()) == []


def test_no_import_circles() -> None:
    assert import_circles(import_graph()) == []


def test_no_stale_exceptions() -> None:
    graph = import_graph()
    stale = [
        f"{module} -> {target}"
        for module, target in ALLOWED
        if not any(_under(name, (target,)) for name in graph.get(module, ()))
    ]
    assert stale == [], "remove these from ALLOWED: the import is gone"


@pytest.mark.parametrize(
    ("module", "planted", "rule"),
    [
        ("ingest.store.facade", "from ingest.services.run_analyses import materialise", "the store keeps runs"),
        ("ingest.store.catalog", "from ingest.store.engines.spark_engine import parts_reader", "given its hook"),
        ("ingest.formats.jsonl", "from ingest.importing.configs import meta_with_config_facts", "the readers"),
        ("stab_core.spikes", "import duckdb", "pure core"),
        ("ingest.services.run_cost", "from ingest.importing.importer import store_parsed", "services -> store"),
        ("pages.parts.charts", "from pages.overview import PANELS", "serve the page scripts"),
        ("pages.server", "from ingest.cli import main", "the CLI is the top"),
    ],
)
def test_a_planted_upward_import_is_caught(module: str, planted: str, rule: str) -> None:
    graph = import_graph()
    assert violations(graph) == []
    path = _modules()[module]
    graph[module] = graph[module] | _imports(module, _planted(path, planted))
    found = violations(graph)
    assert len(found) == 1 and found[0].startswith(f"{module} imports ") and rule in found[0], found


def test_a_planted_circle_is_caught() -> None:
    graph = import_graph()
    graph["ingest.store.types"] = graph["ingest.store.types"] | {"ingest.store.facade"}  # facade imports types
    circles = import_circles(graph)
    assert len(circles) == 1 and {"ingest.store.facade", "ingest.store.types"} <= set(circles[0])


def _planted(path: Path, line: str) -> Path:
    """A copy of ``path`` (beside it is not needed: only its imports are read) with ``line`` added inside a
    function, as a lazy import would be."""
    import tempfile

    copy = Path(tempfile.mkdtemp()) / path.name
    copy.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted() -> None:\n    {line}\n", encoding="utf-8")
    return copy
