"""The architecture, held by the code's own imports (docs/architecture.md draws it).

Read with `ast`, nothing is imported: every import statement of the kit and of the reference
server, at module level or inside a function (a lazy import is still a dependency), except
those under ``if TYPE_CHECKING:``. Layers import only downward, modules import in no circle,
the wire layer imports nothing heavy, and the reference server stands on the wire layer alone.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each package of the kit and its layer; a module may import its own layer and those below.
LAYERS = {
    "pytest_laya.wire": 1,
    "pytest_laya.specs": 2,
    "pytest_laya.client": 3,
    "pytest_laya.faults": 4,
    "pytest_laya.fake": 4,
    "pytest_laya.cassettes": 4,
    "pytest_laya.servers": 4,
    "pytest_laya.intercept": 4,
    "pytest_laya.proxy": 4,
    "pytest_laya.store": 4,
    "pytest_laya.models": 5,
    "pytest_laya.contract": 5,
    "pytest_laya.strategies": 5,
    "pytest_laya.suites": 5,
    "pytest_laya.report": 5,
    "pytest_laya.plugin": 6,
    "pytest_laya.__main__": 6,
}
#: What the wire layer may never import (it is the protocol, usable anywhere, cheaply).
HEAVY = {"pytest", "httpx", "vcr", "yaml", "jsonschema", "referencing", "starlette", "uvicorn", "anyio",
         "torch", "transformers", "laya", "hypothesis"}
#: Modules of the kit over 500 lines, each holding one idea.
ONE_IDEA = {
    "pytest_laya/specs/schema_compiler.py": "compiles JSON Schema keywords into predicates",
    "pytest_laya/specs/spec.py": "the validator: one Spec and how it reports a violation",
}
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules `module` imports at run time (resolved to known modules where they are ours)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _layer(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return best[1] if best else None


KIT = _sources("pytest_laya")
SERVER = _sources("pytest_laya_reference")
GRAPH = {name: _imports(path, name, set(KIT) | set(SERVER)) for name, path in {**KIT, **SERVER}.items()}


def test_every_module_of_the_kit_has_a_layer():
    unplaced = [m for m in KIT if m != "pytest_laya" and _layer(m) is None]
    assert unplaced == [], f"give these a layer in LAYERS (and docs/architecture.md): {unplaced}"


def test_layers_import_only_downward():
    upward = []
    for module, imported in GRAPH.items():
        own = _layer(module)
        if own is None:
            continue
        for target in imported:
            theirs = _layer(target)
            if theirs is not None and theirs > own:
                upward.append(f"{module} (layer {own}) imports {target} (layer {theirs})")
    assert upward == [], "\n".join(sorted(upward))


def test_the_kit_imports_itself_in_no_circle():
    kit_edges = {m: {t for t in ts if t in KIT and t != m} for m, ts in GRAPH.items() if m in KIT}
    # A package's __init__ re-exporting its own modules is not a circle of ideas; the modules are.
    for module in kit_edges:
        if KIT[module].name == "__init__.py":
            kit_edges[module] = {t for t in kit_edges[module] if not t.startswith(module + ".")}
    circles = []
    state: dict[str, int] = defaultdict(int)
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(kit_edges.get(node, ())):
            if state[nxt] == 1:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif state[nxt] == 0:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(kit_edges):
        if state[module] == 0:
            walk(module)
    assert circles == [], "\n".join(circles)


def test_the_wire_layer_imports_nothing_heavy():
    heavy = sorted(f"{m} imports {t}" for m, ts in GRAPH.items() if m.startswith("pytest_laya.wire")
                   for t in ts if t.split(".")[0] in HEAVY)
    assert heavy == [], "\n".join(heavy)


def test_the_reference_server_stands_on_the_wire_layer_alone():
    beyond = sorted(f"{m} imports {t}" for m, ts in GRAPH.items() if m.startswith("pytest_laya_reference")
                    for t in ts if t.split(".")[0] == "pytest_laya" and _layer(t) != 1)
    assert beyond == [], "\n".join(beyond)


def test_only_the_reference_server_fixture_imports_the_reference_server():
    importers = sorted({m for m, ts in GRAPH.items() if m in KIT for t in ts if t.split(".")[0] == "pytest_laya_reference"})
    assert importers == ["pytest_laya.plugin.servers"]
    tree = ast.parse(KIT["pytest_laya.plugin.servers"].read_text(encoding="utf-8"))
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                 and any(a.name.startswith("pytest_laya_reference") or (getattr(n, "module", "") or "").startswith("pytest_laya_reference")
                         for a in n.names)]
    assert top_level == [], "the reference server must be imported lazily, inside the fixture"


def _private_names_imported(path: Path, module: str) -> list[str]:
    """`from X import _name` where X is another module of the kit or the reference server."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join([*base, source] if source else base)
        if source.split(".")[0] not in ("pytest_laya", "pytest_laya_reference") or source == module:
            continue
        found += [f"{module}:{node.lineno} takes {alias.name} from {source}" for alias in node.names
                  if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_takes_another_modules_private_names():
    taken = [line for name, path in {**KIT, **SERVER}.items() for line in _private_names_imported(path, name)]
    assert taken == [], "a name used by another module is part of its API: drop the underscore\n" + "\n".join(taken)


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in KIT.values()))
def test_no_module_is_over_500_lines_unless_it_holds_one_idea(path):
    lines = len((ROOT / path).read_text(encoding="utf-8").splitlines())
    if path in ONE_IDEA:
        return
    assert lines <= MAX_LINES, f"{path} has {lines} lines: split it by its jobs, or name its one idea in ONE_IDEA"


def test_the_one_idea_list_names_only_long_modules():
    short = [p for p in ONE_IDEA if len((ROOT / p).read_text(encoding="utf-8").splitlines()) <= MAX_LINES]
    assert short == [], f"no longer over {MAX_LINES} lines, drop them from ONE_IDEA: {short}"


def test_import_pytest_laya_loads_nothing_heavy():
    import subprocess

    code = ("import sys, pytest_laya, pytest_laya.plugin, pytest_laya.cassettes, pytest_laya.fake, pytest_laya.store, "
            "pytest_laya.report; print(sorted(m for m in ('torch','transformers','laya','uvicorn','starlette','vcr',"
            "'fsspec','s3fs','matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
