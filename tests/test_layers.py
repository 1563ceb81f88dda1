"""The architecture, held by the code's own imports (docs/architecture.md draws it).

Read with `ast`, nothing is imported: every import statement of the kit and of the reference
server, at module level, inside a function (a lazy import is still a dependency) or under ``if
TYPE_CHECKING:`` (a type named is a dependency too). Layers import only downward, modules
import in no circle, the wire layer imports nothing heavy, and the reference server stands on
the wire layer alone.
"""

from __future__ import annotations

import ast
import sys
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
    "pytest_laya.route": 4,
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


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules `module` imports, anywhere (resolved to known modules where they are ours)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
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


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a circle (strongly connected components
    of more than one module), each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(groups)


def _edges(graph: dict[str, set[str]], modules: dict[str, Path]) -> dict[str, set[str]]:
    edges = {m: {t for t in ts if t in modules and t != m} for m, ts in graph.items() if m in modules}
    # A package's __init__ re-exporting its own modules is not a circle of ideas; the modules are.
    for module in edges:
        if modules[module].name == "__init__.py":
            edges[module] = {t for t in edges[module] if not t.startswith(module + ".")}
    return edges


#: The recording suite's helpers (cassettes/recording/, imported by their bare names).
RECORDING = {p.stem: p for p in sorted((ROOT / "cassettes" / "recording").glob("*.py"))}
RECORDING_GRAPH = {name: _imports(path, name, set(RECORDING)) for name, path in RECORDING.items()}
#: Circles still being broken, each with its owner; an entry goes when its circle does.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _unexplained(groups: list[list[str]]) -> list[str]:
    return [" <-> ".join(group) for group in groups if not any(set(group) <= known for known in KNOWN_CIRCLES)]


def test_the_kit_imports_itself_in_no_circle():
    circles = _unexplained(_circles(_edges(GRAPH, KIT)) + _circles(_edges(RECORDING_GRAPH, RECORDING)))
    assert circles == [], "these modules import each other in a circle (TYPE_CHECKING and lazy imports count): " \
        "move what they share to the module it belongs to\n" + "\n".join(circles)


def test_the_known_circles_are_still_there():
    groups = _circles(_edges(GRAPH, KIT))
    gone = [sorted(known) for known in KNOWN_CIRCLES if not any(set(group) <= known for group in groups)]
    assert gone == [], f"no longer a circle, drop it from KNOWN_CIRCLES: {gone}"


def test_the_circle_check_sees_every_kind_of_import(tmp_path):
    """A circle closed only by a lazy import, or only by one under TYPE_CHECKING, is a circle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import C\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n")
    modules = {f"pkg.{p.stem}": p for p in package.glob("?.py")}
    graph = {name: _imports(path, name, set(modules)) for name, path in modules.items()}
    assert _circles(_edges(graph, modules)) == [["pkg.a", "pkg.b", "pkg.c"]]
    (package / "c.py").write_text("import typing\n")
    graph["pkg.c"] = _imports(package / "c.py", "pkg.c", set(modules))
    assert _circles(_edges(graph, modules)) == []


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


def test_the_plugin_starts_without_httpx_or_yaml():
    # Every pytest run loads the plugin; a run that replays nothing (or replays from the derived
    # cache) should not pay for httpx and YAML. `pytest_laya.cassettes` loads its modules lazily
    # for this: the plugin's start-up reads only its file names.
    import subprocess

    code = ("import sys, pytest_laya.plugin; "
            "print(sorted(m for m in ('httpx','yaml','pytest_laya.cassettes.handle') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    done = subprocess.run([sys.executable, "-c", "import pytest_laya.cassettes as c; print(c.CassetteHandle.__name__, "
                           "sorted(c.__all__) == sorted(name for name in c.__all__ if getattr(c, name, None) is not None))"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["CassetteHandle", "True"]  # every exported name still resolves
