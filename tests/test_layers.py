"""The house in layers (docs/architecture.md, "The code's layers"): each package of
`controller/` imports only from the layers below it, siblings of one layer never import
each other, no module imports another in a circle, and no private name crosses a module.

Read from the source with `ast` (imports inside functions count too), so the day someone
adds an upward import by hand, this test names it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# From the ground up. A module belongs to the longest prefix that names it; a group of
# several prefixes is one layer whose members are independent of each other.
LAYERS: list[list[str]] = [
    ["controller", "controller.settings", "controller.errors", "controller.states",
     "controller.logs", "controller.retry", "controller.extras"],
    ["controller.catalog"],
    ["controller.language"],
    ["controller.planning"],
    ["controller.db", "controller.store", "controller.backends"],
    ["controller.metrics"],
    ["controller.intake", "controller.results", "controller.leader"],
    ["controller.attempts"],
    ["controller.reconcile"],
    ["controller.runs"],
    ["controller.service"],
    ["controller.principal"],
    ["controller.api"],
    ["controller.api.web"],
    ["controller.api.app"],
    ["controller.cli"],
]
GROUND = 0


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module imported (or the module a name was taken from)
    name: str  # the name taken ("*" for a plain import)
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(*packages: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(modules: dict[str, Path]) -> list[Import]:
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found: list[Import] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    target = resolve(f"{base}.{alias.name}") or resolve(base)
                    if target and target != module:
                        name = "*" if target == f"{base}.{alias.name}" else alias.name
                        found.append(Import(module, target, name, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = resolve(alias.name)
                    if target and target != module:
                        found.append(Import(module, target, "*", node.lineno))
    return found


def layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for index, group in enumerate(LAYERS):
        for prefix in group:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (index, prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return best


def upward_imports(found: list[Import]) -> list[str]:
    wrong = []
    for imp in found:
        if not imp.target.startswith("controller"):
            continue
        (low, own), (high, theirs) = layer_of(imp.source), layer_of(imp.target)
        if high > low:
            wrong.append(f"{imp.source}:{imp.line} imports {imp.target} (a layer above)")
        elif high == low and own != theirs and low != GROUND:
            wrong.append(f"{imp.source}:{imp.line} imports its sibling {imp.target}")
    return wrong


def circles(found: list[Import]) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return loops


def private_crossings(found: list[Import]) -> list[str]:
    return [
        f"{imp.source}:{imp.line} takes {imp.name} from {imp.target}"
        for imp in found
        if imp.name.startswith("_") and not imp.name.startswith("__")
    ]


CONTROLLER = all_modules("controller")
SANDBOX = all_modules("sandbox_image")


def test_no_module_of_controller_imports_a_layer_above_or_a_sibling() -> None:
    assert upward_imports(imports_of(CONTROLLER)) == []


def test_no_circle_of_imports() -> None:
    assert circles(imports_of(CONTROLLER)) == []
    assert circles(imports_of(SANDBOX)) == []


def test_no_private_name_crosses_a_module() -> None:
    assert private_crossings(imports_of(CONTROLLER) + imports_of(SANDBOX)) == []


def test_the_sandbox_runtime_never_imports_the_controller() -> None:
    found = imports_of({**CONTROLLER, **SANDBOX})
    assert [i for i in found if i.source.startswith("sandbox_image")
            and i.target.startswith("controller")] == []


def test_every_package_says_what_it_is() -> None:
    for module, path in CONTROLLER.items():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc, f"{module}/__init__.py has no docstring saying what it offers"


@pytest.mark.parametrize(
    ("source", "line", "layer_says"),
    [
        ("controller/catalog/templates.py", "from controller.planning.plan import Plan",
         "a layer above"),
        ("controller/intake/ingest.py", "from controller.results.report import build_report",
         "sibling"),
        ("controller/language/grammar.py", "from controller.principal import assistant",
         "a layer above"),
    ],
)
def test_an_upward_import_added_by_hand_is_named(source: str, line: str, layer_says: str) -> None:
    """The checker itself: the same modules with one import added are refused."""
    path = ROOT / source
    module = module_name(path)
    patched = dict(CONTROLLER)
    fake = ROOT / "tests" / "_layer_probe.py"
    try:
        fake.write_text(path.read_text() + "\n" + line + "\n")
        patched[module] = fake
        found = [
            Import(module, i.target, i.name, i.line)
            for i in imports_of({**patched})
            if i.source == "tests._layer_probe" or i.source == module
        ]
    finally:
        fake.unlink(missing_ok=True)
    wrong = upward_imports(found)
    assert any(layer_says in w and module in w for w in wrong), wrong


MAX_MODULE_LINES = 400  # STYLE.md: a module a reader holds in mind at once


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for package in ("controller", "sandbox_image")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these (STYLE.md asks for about {MAX_MODULE_LINES} lines): {long}"
