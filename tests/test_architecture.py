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


def test_imports_run_one_way_from_the_top_floor_down():
    floor = {package: index for index, package in enumerate(FLOORS)}
    upward = []
    for module, path in _modules().items():
        here = floor[module.split(".")[0]]
        for line, imported in _imports(path, module, top_level_only=False):
            there = floor.get(imported.split(".")[0])
            if there is not None and there < here:
                upward.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {imported}")
    assert not upward, "imports against the direction " + " → ".join(FLOORS) + ":\n" + "\n".join(upward)


def test_no_import_circle():
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


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
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


def _parts_of(package: str, module: str) -> str | None:
    """The part of ``package`` (its submodule or subpackage) that holds ``module``, or ``None``
    when ``module`` is not inside ``package`` (or is the package itself)."""
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1 :].split(".")[0]


def _part_circles(graph: dict[str, list[str]], packages: list[str]) -> list[str]:
    """Circles between the parts of each package in ``packages`` (its subpackages and modules, a
    part standing for every module inside it), given the module import ``graph``."""
    found = []
    for package in packages:
        parts: dict[str, set[str]] = {}
        for module, imported in graph.items():
            here = _parts_of(package, module)
            if here is None:
                continue
            parts.setdefault(here, set())
            for other in imported:
                there = _parts_of(package, other)
                if there is not None and there != here:
                    parts[here].add(there)
        for circle in _strongly_connected(
            {part: sorted(others) for part, others in parts.items()}
            | {there: [] for others in parts.values() for there in others if there not in parts}
        ):
            found.append(" ↔ ".join(sorted(circle)))
    return found


def _module_graph() -> dict[str, list[str]]:
    """Every module's imports of the project's modules (each import counted: inside functions
    and under ``TYPE_CHECKING`` too), less a package's own modules its ``__init__`` imports."""
    modules = _modules()
    return {
        module: sorted(
            imported
            for imported in {
                imported
                for _, imported in _imports(path, module, top_level_only=False, type_checking=True)
                if imported in modules
            }
            if imported != module and not module.startswith(imported + ".")
        )
        for module, path in modules.items()
    }


def test_no_import_circle_between_the_subpackages_of_a_package():
    """Within every package (``routing``, ``routing.engine``, ``conduit_site.console``…), its
    subpackages and modules import one way: ``routing.config`` never imports what imports it
    back, through any module of either."""
    modules = _modules()
    packages = sorted(module for module, path in modules.items() if path.name == "__init__.py")
    circles = _part_circles(_module_graph(), packages)
    assert not circles, "import circles between the parts of a package:\n" + "\n".join(circles)


def _private_imports(path: Path, module: str, modules: set[str]) -> list[str]:
    """Where ``path`` (the module ``module``) uses a private name (``_name``, not a dunder) of
    another of ``modules``: ``from other import _name`` or ``other._name``."""

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    found = []
    where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path.name
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    aliases: dict[str, str] = {}  # a local name bound to another module of ``modules``
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.name != module:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                if whole in modules:
                    if whole != module:
                        aliases[alias.asname or alias.name] = whole
                elif base in modules and base != module and private(alias.name):
                    found.append(f"{where}:{node.lineno} imports {alias.name} from {base}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            value = node.value
            # ``name._x`` or ``package.module._x`` where the name (or dotted path) is an imported module.
            dotted = []
            while isinstance(value, ast.Attribute):
                dotted.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                owner = ".".join([aliases[value.id], *dotted])
                if owner in modules and owner != module:
                    found.append(f"{where}:{node.lineno} uses {owner}.{node.attr}")
    return found


def test_no_module_uses_a_private_name_of_another():
    """A name starting with ``_`` belongs to its module: no other module, nor a test, imports it
    (``from routing.config.reader import _Reader``) or reaches for it (``reader._Reader``). What
    two modules share is public, or lives with the one that uses it."""
    modules = _modules()
    names = set(modules)
    found = []
    for module, path in modules.items():
        found.extend(_private_imports(path, module, names))
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        found.extend(
            _private_imports(path, ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts), names)
        )
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_checks_see_a_circle_of_subpackages_and_a_private_import(tmp_path):
    """The walks themselves: two subpackages importing each other (one inside a function, one
    under ``TYPE_CHECKING``) are a circle; a private name imported or reached for is found."""
    graph = {
        "pkg.config.validate": ["pkg.acceptance.envelopes"],
        "pkg.acceptance.services": ["pkg.config.selectors"],
        "pkg.acceptance.envelopes": [],
        "pkg.config.selectors": [],
        "pkg.models": [],
        "pkg.engine.loop": ["pkg.models", "pkg.config.selectors"],
    }
    assert _part_circles(graph, ["pkg", "pkg.config"]) == ["pkg.acceptance ↔ pkg.config"]
    assert _part_circles({**graph, "pkg.acceptance.services": []}, ["pkg"]) == []
    inner = tmp_path / "inner.py"
    inner.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.acceptance.services\n\n"
        "def f():\n    from pkg.acceptance import envelopes\n"
    )
    assert [
        name for _, name in _imports(inner, "pkg.config.inner", top_level_only=False, type_checking=True)
    ] == [
        "typing",
        "typing.TYPE_CHECKING",
        "pkg.acceptance.services",
        "pkg.acceptance",
        "pkg.acceptance.envelopes",
    ]
    user = tmp_path / "user.py"
    user.write_text(
        "from pkg.config.reader import MAX, _Reader\nfrom pkg.config import reader\n"
        "import pkg.config.reader as r\n\ndef f():\n    return reader._MISSING, r._same, reader.__name__\n"
    )
    modules = {"pkg.config.reader", "pkg.config", "pkg"}
    found = _private_imports(user, "pkg.user", modules)
    assert [line.split(" ", 1)[1] for line in found] == [
        "imports _Reader from pkg.config.reader",
        "uses pkg.config.reader._MISSING",
        "uses pkg.config.reader._same",
    ]
    assert _private_imports(user, "pkg.config.reader", modules) == []
