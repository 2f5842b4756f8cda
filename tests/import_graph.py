"""The import graph of ``xsm_celery``, read from the source (the AST), for tests/test_layering.py.

Every ``import`` and ``from ... import`` counts wherever it sits: at module level, inside a
function or method (it runs when the function does, so it is as much a dependency), and under
``if TYPE_CHECKING:``, which is kept apart (``type_only``): it never runs, so it cannot take
part in an import cycle, but it still ties a module to the other's types.

``from a.b import name`` is an edge to module ``a.b.name`` when that is a module of the
package, else to ``a.b``. Importing a submodule also runs its packages' ``__init__``; that
implicit edge is not added, as Python resolves a half-initialised parent package the same way
for every submodule.

A string that is exactly the name of a module file of another folder (not a package, whose
name doubles as a logger name) is an import by name, as ``importlib.import_module`` does it:
it is kept apart (``by_name``). It ties the layers like any import; it is left out of the
cycle check because such a module is loaded on first use to register itself with the one
that names it, after both finished importing.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "ImportGraph", "strongly_connected"]

PACKAGE = "xsm_celery"


@dataclass(frozen=True)
class Import:
    """One import statement's edge: who imports what, where, and whether it ever runs."""

    importer: str
    imported: str
    path: Path
    line: int
    in_function: bool
    type_only: bool
    by_name: bool = False

    def where(self, root: Path) -> str:
        """``xsm_celery/engine/machine.py:186 imports xsm_celery.x (inside a function)``."""
        how = " (under TYPE_CHECKING)" if self.type_only else ""
        if self.in_function and not self.type_only:
            how = " (inside a function)"
        if self.by_name:
            how = " (by name, for importlib)"
        return f"{self.path.relative_to(root)}:{self.line} imports {self.imported}{how}"


def _module_names(package_dir: Path) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _third_party(node: ast.Import | ast.ImportFrom) -> set[str]:
    """Top-level names of the packages ``node`` imports that are not stdlib or ours."""
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""] if node.level == 0 else []
    else:
        names = [alias.name for alias in node.names]
    tops = {name.split(".")[0] for name in names}
    return {
        t for t in tops if t not in sys.stdlib_module_names and t not in (PACKAGE, "__future__")
    }


def _folder(module: str) -> str:
    """``xsm_celery.eda.outbox`` -> ``eda``; the top-level package -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


class ImportGraph:
    """Every module of the package, every import edge between them, and third-party imports.

    ``external`` holds the imports of packages that are neither the standard library nor
    ``xsm_celery``, with the top-level package name as ``imported``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules = _module_names(root / PACKAGE)
        self.imports: list[Import] = []
        self.external: list[Import] = []
        for name, path in self.modules.items():
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            self._walk(name, path, tree, in_function=False, type_only=False)

    def _walk(
        self, name: str, path: Path, node: ast.AST, *, in_function: bool, type_only: bool
    ) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in self._targets(name, path, node):
                self.imports.append(Import(name, target, path, node.lineno, in_function, type_only))
            for top in _third_party(node):
                self.external.append(Import(name, top, path, node.lineno, in_function, type_only))
            return
        if isinstance(node, ast.Constant) and self._names_other_module(name, node.value):
            self.imports.append(
                Import(name, node.value, path, node.lineno, in_function, type_only, by_name=True)
            )
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                self._walk(name, path, stmt, in_function=in_function, type_only=True)
            for stmt in node.orelse:
                self._walk(name, path, stmt, in_function=in_function, type_only=type_only)
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            self._walk(name, path, child, in_function=inner, type_only=type_only)

    def _targets(self, name: str, path: Path, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            candidates = [f"{base}.{alias.name}" for alias in node.names]
        for candidate in candidates:
            if candidate != PACKAGE and not candidate.startswith(PACKAGE + "."):
                continue
            resolved = self._resolve(candidate)
            if resolved != name:
                yield resolved

    def _names_other_module(self, name: str, value: object) -> bool:
        """Whether ``value`` names a module file (not a package) outside ``name``'s folder."""
        if not isinstance(value, str) or value not in self.modules:
            return False
        return self.modules[value].name != "__init__.py" and _folder(value) != _folder(name)

    def _resolve(self, dotted: str) -> str:
        """The module ``dotted`` names, or the nearest package or module above it."""
        while dotted not in self.modules and "." in dotted:
            dotted = dotted.rpartition(".")[0]
        return dotted

    def runtime_edges(self) -> dict[str, set[str]]:
        """Module -> modules it imports in code that runs (``TYPE_CHECKING`` left out)."""
        edges: dict[str, set[str]] = {name: set() for name in self.modules}
        for edge in self.imports:
            if not edge.type_only and not edge.by_name:
                edges[edge.importer].add(edge.imported)
        return edges

    def typed_edges(self) -> dict[str, set[str]]:
        """Module -> modules it imports anywhere, ``TYPE_CHECKING`` blocks included."""
        edges: dict[str, set[str]] = {name: set() for name in self.modules}
        for edge in self.imports:
            if not edge.by_name:
                edges[edge.importer].add(edge.imported)
        return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
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
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found
