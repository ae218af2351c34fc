"""The layering of docs/architecture.md holds: no import cycles, no import going up a layer.

Every ``import`` statement of ``logstores`` and ``replay`` counts: at module level, inside
functions and under ``TYPE_CHECKING``. An import of ``a.b.c`` is an edge to the module
``a.b.c`` (a name imported from a package means that package's ``__init__``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("logstores", "replay")

LAYERS: dict[str, int] = {
    "logstores": 0,
    "replay.protocol": 1,
    "replay.progress": 1,
    "replay.log": 2,
    "replay.data": 3,
    "replay.state": 4,
    "replay.txn": 5,
    "replay.cdc": 5,
    "replay.dml": 6,
    "replay.maintenance": 6,
    "replay.delta_log": 7,
    "replay.table": 7,
    "replay": 8,
    "replay.__main__": 8,
    "replay.spark": 8,
    "replay.cli": 8,
    "replay.testing": 8,
}
"""Layer of each package or module (the longest matching prefix wins); a module may import its
own layer and those below. ``replay`` itself is its ``__init__``: the public API, on top."""
SIBLINGS = {frozenset({"replay.txn", "replay.cdc"}), frozenset({"replay.dml", "replay.maintenance"})}
"""Packages on one layer that must not import each other."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def layer_key(module: str) -> str:
    candidates = [key for key in LAYERS if module == key or module.startswith(key + ".")]
    assert candidates, f"{module} belongs to no layer of LAYERS: add it"
    return max(candidates, key=len)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, as a path that returns to its start, or ``None``."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_go_down_the_layers() -> None:
    problems = []
    for module, targets in sorted(import_graph().items()):
        source = layer_key(module)
        for target in sorted(targets):
            destination = layer_key(target)
            if LAYERS[destination] > LAYERS[source]:
                problems.append(f"{module} ({source}) imports {target} ({destination}), a higher layer")
            elif frozenset({source, destination}) in SIBLINGS:
                problems.append(f"{module} imports {target}: {source} and {destination} are independent")
    assert not problems, "\n".join(problems)


def test_logstores_never_imports_replay() -> None:
    graph = import_graph()
    offenders = sorted(
        m
        for m, targets in graph.items()
        if m.startswith("logstores") and any(t.startswith("replay") for t in targets)
    )
    assert not offenders


def test_protocol_imports_only_stdlib_pyarrow_and_orjson() -> None:
    allowed_third_party = {"pyarrow", "orjson"}
    problems = []
    for name, path in all_modules().items():
        if not name.startswith("replay.protocol"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            roots = []
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                roots = [node.module.split(".")[0]]
            for root in roots:
                if root in ("replay", "__future__") or root in allowed_third_party:
                    continue
                if root in sys.stdlib_module_names:
                    continue
                problems.append(f"{name} imports {root}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, None),
    ],
)
def test_cycle_finder_finds_cycles(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_graph_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    known = {"replay.x", "replay.y", "replay.z"}
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from replay.y import Y\n"
        "def f():\n    import replay.z\n",
        encoding="utf-8",
    )
    assert imports_of("replay.x", source, known) == {"replay.y", "replay.z"}
