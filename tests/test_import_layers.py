"""dlperf's packages form layers that import downward only.

A module may import modules of its own layer or a lower one, never a higher
one; no two modules import each other, directly or round a loop, through
their top-level imports; and a dlperf import sits at the top of its module,
not inside a function, except in the command line (which loads each verb's
code when the verb runs) and `api.py` (the facade that reaches every layer).
Imports under `if TYPE_CHECKING:` run only for type checkers and are ignored.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "dlperf"

# The first name under dlperf (a subpackage or a root module) -> its layer.
LAYERS = {
    "errors": 0, "kinds": 0, "dtypes": 0, "costs": 0, "jsonable": 0,
    "precision": 1, "hardware": 1,
    "kernels": 2,
    "tracing": 3, "models": 3,
    "ops": 4,
    "compiling": 5, "optimizer": 5, "configs": 5, "checkpointing": 5,
    "analysis": 6,
    "training_memory": 7,
    "run_config": 8, "run": 8,
    "advice": 9, "parallel": 9,
    "serving": 10, "measurement": 10,
    "rendering": 11,
    "api": 12,
    "__init__": 13, "cli": 13, "__main__": 13,
}  # fmt: skip

# Files whose dlperf imports may sit inside functions.
LAZY_ALLOWED = ("dlperf/cli/", "dlperf/api.py")

@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted
    path: str  # the importing file, relative to src/
    line: int
    in_function: bool

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def resolve(name: str, known: dict[str, Path]) -> str:
    """The module an import of `name` loads: the longest known prefix."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(path: Path, known: dict[str, Path]) -> list[Import]:
    source = module_name(path)
    is_package = path.name == "__init__.py"
    rel = path.relative_to(SRC).as_posix()
    found: list[Import] = []

    def add(target: str, node: ast.stmt, in_function: bool) -> None:
        if target == "dlperf" or target.startswith("dlperf."):
            found.append(Import(source, resolve(target, known), rel, node.lineno, in_function))

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, in_function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = source.split(".")
                # a package's own name is its first level; a module's is its parent
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                add(sub if sub in known else module, node, in_function)
        inner = in_function or isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        )
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return list(dict.fromkeys(found))


def layer(module: str) -> int:
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    if name not in LAYERS:
        raise AssertionError(f"dlperf.{name} has no layer: add it to LAYERS")
    return LAYERS[name]


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    known = modules()
    return [imp for path in known.values() for imp in imports_of(path, known)]


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer(module)


def test_every_module_imports() -> None:
    """A relative import of a moved module fails only when it runs."""
    for module in modules():
        if not module.endswith("__main__"):
            importlib.import_module(module)


def test_imports_go_downward(graph: list[Import]) -> None:
    upward = [
        f"{imp.where()}: {imp.source} (layer {layer(imp.source)}) imports "
        f"{imp.target} (layer {layer(imp.target)})"
        for imp in graph
        if layer(imp.target) > layer(imp.source)
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_imports_inside_functions(graph: list[Import]) -> None:
    lazy = [
        f"{imp.where()}: {imp.source} imports {imp.target} inside a function"
        for imp in graph
        if imp.in_function and not imp.path.startswith(LAZY_ALLOWED)
    ]
    assert not lazy, "dlperf imports inside functions:\n" + "\n".join(lazy)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return groups


def test_no_import_cycles(graph: list[Import]) -> None:
    top = [imp for imp in graph if not imp.in_function]
    edges: dict[str, set[str]] = {}
    for imp in top:
        if imp.target != imp.source:
            edges.setdefault(imp.source, set()).add(imp.target)
    problems = []
    for group in strongly_connected(edges):
        members = set(group)
        lines = [
            f"  {imp.where()}: {imp.source} imports {imp.target}"
            for imp in top
            if imp.source in members and imp.target in members
        ]
        problems.append("cycle among " + ", ".join(group) + ":\n" + "\n".join(lines))
    assert not problems, "import cycles:\n" + "\n".join(problems)


def test_the_walker_sees_relative_and_lazy_imports(tmp_path: Path) -> None:
    known = modules()
    imports = imports_of(PACKAGE / "run.py", known)
    assert any(i.target == "dlperf.analysis" and not i.in_function for i in imports)
    handlers = imports_of(PACKAGE / "cli" / "handlers.py", known)  # the CLI's lazy loading
    assert any(i.target == "dlperf.api" and i.in_function for i in handlers)
