"""The house's rules, checked on the source: imports run one way, from the top floor down
(``conduit_site`` → ``controls`` → ``routing`` → ``worklife`` → ``causal`` → ``infra``), and
no module imports itself back through others (no import circle)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Top floor first; a package may import only packages at its own floor or below.
FLOORS = ("conduit_site", "controls", "routing", "worklife", "causal", "infra")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in FLOORS:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    path: Path, module: str, *, top_level_only: bool, type_checking: bool = False
) -> list[tuple[int, str]]:
    """(line, imported module) of every import in ``path``; ``top_level_only``: those run when
    the module loads (not inside a function); ``type_checking``: those under
    ``if TYPE_CHECKING:`` too."""
    found: list[tuple[int, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for other in child.orelse:
                    visit_one(other)
                continue
            if top_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            visit_one(child)

    def visit_one(child: ast.AST) -> None:
        if isinstance(child, ast.Import):
            found.extend((child.lineno, alias.name) for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((child.lineno, base))
            # "from package import module" imports the module too.
            found.extend((child.lineno, f"{base}.{alias.name}") for alias in child.names)
        visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def test_i35_imports_run_one_way_from_the_top_floor_down():
    floor = {package: index for index, package in enumerate(FLOORS)}
    upward = []
    for module, path in _modules().items():
        here = floor[module.split(".")[0]]
        for line, imported in _imports(path, module, top_level_only=False):
            there = floor.get(imported.split(".")[0])
            if there is not None and there < here:
                upward.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {imported}")
    assert not upward, "imports against the direction " + " → ".join(FLOORS) + ":\n" + "\n".join(upward)


def test_i35_no_import_circle():
    """Type-only imports count here: a circle of types is a circle of ideas."""
    modules = _modules()
    graph = {
        module: sorted(
            {
                imported
                for _, imported in _imports(path, module, top_level_only=False, type_checking=True)
                if imported in modules
            }
            - {module}
        )
        for module, path in modules.items()
    }
    # A package's __init__ importing its own submodules is not a circle of two ideas.
    for module in graph:
        graph[module] = [other for other in graph[module] if not module.startswith(other + ".")]
    circles = _strongly_connected(graph)
    assert not circles, "import circles:\n" + "\n".join(" ↔ ".join(sorted(circle)) for circle in circles)


def _strongly_connected(graph: dict[str, list[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return components


def test_i35_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    """The walk itself: an upward import and a two-module circle are found."""
    low = tmp_path / "low.py"
    low.write_text("from high import thing\n\ndef f():\n    import high\n")
    assert [name for _, name in _imports(low, "low", top_level_only=False)] == ["high", "high.thing", "high"]
    assert [name for _, name in _imports(low, "low", top_level_only=True)] == ["high", "high.thing"]
    guarded = tmp_path / "guarded.py"
    guarded.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import high\n")
    assert [name for _, name in _imports(guarded, "guarded", top_level_only=False)] == [
        "typing",
        "typing.TYPE_CHECKING",
    ]
    assert _strongly_connected({"a": ["b"], "b": ["a"], "c": ["a"]}) == [{"a", "b"}]
