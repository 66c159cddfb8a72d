"""The import structure of braze (docs/architecture.md, "The pipeline"): imports go one way down the pipeline.

The graph is read from the source with `ast`, not by importing: every `import` statement counts,
at module level or inside a function (an import inside a function still ties the two modules
together; it only hides the cycle until the function runs). Imports under `if TYPE_CHECKING:`
never run and only name a type for an annotation (a tensor knows its fusion and the fusion its
tensors), so they do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from source_trees import parse_files

import braze

# braze's packages, lowest first: a module may import its own package and the layers below its own.
# A top-level module (engine.py) is a package of its own; "braze" is the package's __init__ (the API).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("dtypes", "config"),
    ("record",),  # bz.record(): what the compile and run sides did on this thread
    ("ir", "kir"),
    ("ops",),
    ("schedule", "passes"),
    ("codegen",),
    ("compile",),  # Kernel IR -> source (codegen) -> binary -> loaded module; the LLVM toolchain, the disk cache
    ("native",),  # what llvmlite builds at run time (the LLVM toolchain, the disk cache): builtins, launches
    ("host",),  # the host program; its shape functions are native
    ("lower", "runtime"),
    ("engine",),
    ("frontend",),
    ("torch",),  # braze.torch: the torch.compile backend's user-facing module
    ("braze",),
    ("cli",),  # the `braze` command and what it runs: the demos, the fusion suite (braze/cli/)
    ("__main__",),
)
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}

# The rules docs/architecture.md states in words, checked on their own so a broken one is named.
ONLY_IMPORTS = {"ir": {"dtypes", "errors"}, "kir": {"dtypes", "errors"}}
NEVER_IMPORTS = {"runtime": {"frontend", "engine", "schedule", "lower"}}


def modules(root: Path, name: str) -> dict[str, Path]:
    """Every module of the package at `root` (named `name`), by dotted name."""
    found = {}
    for path in root.rglob("*.py"):
        parts = [name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skipped


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may bind a module from (`from a import b`: a.b, else a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join([*anchor, *([base] if base else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The innermost known module `name` lies in (`braze.ir.tensor.TensorView` -> braze.ir.tensor)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    graph = {}
    trees = parse_files(list(known.values()))
    for module, path in known.items():
        tree = trees[path]
        skipped = _type_checking_only(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            names = _imported_names(node, module, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom) and names:
                base = names.pop()  # `from a import b` imports a, and a.b only when b is a module
                resolved = {n if n in known else _resolve(base, known) for n in names}
            else:
                resolved = {_resolve(n, known) for n in names}
            targets |= resolved
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in import order, the first repeated), or None."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def package_of(module: str) -> str:
    """braze.runtime.cpu -> runtime; braze.engine -> engine; braze -> braze."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the module imports behind it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            pair = (package_of(module), package_of(target))
            if pair[0] != pair[1]:
                edges.setdefault(pair, []).append(f"{module} -> {target}")
    return edges


ROOT = Path(braze.__file__).parent


# Built when a test asks, not when pytest collects this file: parsing every module of braze takes seconds,
# and each pytest-xdist worker collects every file.
@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(modules(ROOT, "braze"))


@pytest.fixture(scope="module")
def edges(graph) -> dict[tuple[str, str], list[str]]:
    return package_edges(graph)


def test_no_module_imports_itself_through_others(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_package_has_a_layer(graph):
    unplaced = sorted({package_of(m) for m in graph} - set(RANK))
    assert not unplaced, f"packages with no layer in LAYERS: {unplaced}"


def test_packages_import_only_layers_below(edges):
    upward = {f"{a} -> {b}": uses for (a, b), uses in edges.items()
              if a in RANK and b in RANK and RANK[a] <= RANK[b]}
    assert not upward, f"imports that do not go down the pipeline: {upward}"


def test_ir_and_kir_import_only_dtypes_and_errors(edges):
    extra = {pair: uses for pair, uses in edges.items() if pair[0] in ONLY_IMPORTS
             and pair[1] not in ONLY_IMPORTS[pair[0]]}
    assert not extra, f"ir/ and kir/ import only dtypes and errors: {extra}"


def test_runtime_never_imports_the_compile_side(edges):
    banned = {pair: uses for pair, uses in edges.items() if pair[1] in NEVER_IMPORTS.get(pair[0], ())}
    assert not banned, f"runtime/ never imports frontend/, engine, schedule/ or lower/: {banned}"


def test_codegen_never_imports_the_run_side(edges):
    """Launches are planned in codegen (codegen/cuda_launch.py) and made by the runtime, never the
    other way round."""
    upward = {pair: uses for pair, uses in edges.items() if pair[0] == "codegen" and pair[1] in ("runtime", "host")}
    assert not upward, f"codegen/ never imports runtime/ or host/: {upward}"


# Classes of one name in two modules, on purpose: the Fusion IR and Kernel IR each have expressions,
# always read through their package (`ir.Expr`, `k.Expr`).
SHARED_CLASS_NAMES = {"Expr"}


def test_each_public_class_name_means_one_thing():
    defined: dict[str, list[str]] = {}
    known = modules(ROOT, "braze")
    trees = parse_files(list(known.values()))
    for module, path in known.items():
        for node in trees[path].body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(module)
    twice = {name: where for name, where in defined.items() if len(where) > 1 and name not in SHARED_CLASS_NAMES}
    assert not twice, f"classes of one name in several modules: {twice}"


# --- the walker itself, on a package made for the purpose ----------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(modules(tmp_path / "pkg", "pkg"))


def test_an_import_inside_a_function_closes_a_cycle(tmp_path):
    graph = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import g\n",
        "b.py": "def g():\n    from pkg import a\n    return a\n",
    })
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_relative_imports_and_names_resolve_to_their_modules(tmp_path):
    graph = _package(tmp_path, {
        "__init__.py": "from .sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "from typing import TYPE_CHECKING\nfrom ..d import value\nif TYPE_CHECKING:\n"
                    "    from pkg import e\n",
        "d.py": "import pkg.sub\nvalue = 1\n",
        "e.py": "",
    })
    assert graph["pkg"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.d"}  # the import under TYPE_CHECKING does not count
    assert graph["pkg.d"] == {"pkg.sub"}
    assert find_cycle(graph) is None
    assert package_edges(graph) == {("pkg", "sub"): ["pkg -> pkg.sub.c"], ("sub", "d"): ["pkg.sub.c -> pkg.d"],
                                    ("d", "sub"): ["pkg.d -> pkg.sub"]}
