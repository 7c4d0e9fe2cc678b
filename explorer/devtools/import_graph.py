"""The project's own imports, read from the source with ``ast`` (nothing is imported).

``python -m explorer.devtools.import_graph > docs/imports.md`` redraws the picture in
docs/imports.md: a Mermaid graph of which part of ``explorer/`` and ``app/`` imports which
(a package's modules drawn as one box, so that the page stays readable). The same edges
are what tests/test_imports.py checks: no import circle between modules nor between the drawing's
boxes, and no import of a project module inside a function (the usual way to hide a circle).
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("explorer", "app")


@dataclass(frozen=True)
class Import:
    """One import of a project module by another."""

    importer: str  # dotted module name, e.g. "explorer.build"
    imported: str
    line: int
    local: bool  # inside a function: runs when the function is called, not when the module loads


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module of the packages (``pkg/__init__.py`` is ``pkg``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name | ast.Attribute) and (
        getattr(node.test, "id", None) == "TYPE_CHECKING" or getattr(node.test, "attr", None) == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module):
    """(node, inside a function) for each import statement that runs; ``if TYPE_CHECKING:`` blocks never do."""
    stack = [(child, False) for child in reversed(tree.body)]
    while stack:
        node, local = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, local
        elif not _type_checking_only(node):
            local = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            stack.extend((child, local) for child in reversed(list(ast.iter_child_nodes(node))))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` the module mod.
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    return [name for name in dict.fromkeys(names) if name in known]


def _with_packages(target: str, importer: str, known) -> list[str]:
    """``target`` and the packages Python imports before it (their ``__init__`` runs first),
    but not those that hold the importer: they are already being imported."""
    parts = target.split(".")
    outer = [".".join(parts[:n]) for n in range(1, len(parts))]
    return [p for p in outer if p in known and not (importer + ".").startswith(p + ".")] + [target]


def imports(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> list[Import]:
    """Every import of a project module by a project module, in file and line order; importing
    ``explorer.measure.worker`` from outside ``explorer.measure`` also imports ``explorer.measure``."""
    known = modules(root, packages)
    found = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, local in _import_nodes(tree):
            for target in _targets(node, module, path.name == "__init__.py", set(known)):
                found += [Import(module, name, node.lineno, local)
                          for name in _with_packages(target, module, known) if name != module]
    return list(dict.fromkeys(found))


def circles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The import circles: each group of modules that import one another, directly or not
    (strongly connected components of more than one module, Tarjan's algorithm), sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (a few hundred)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def box(module: str) -> str:
    """The box a module is drawn in: its subpackage (``explorer.analysis``), or itself for the
    top-level modules of ``explorer`` and ``app`` (``explorer.build``, ``app.panels``)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def reduced(edges: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The edges of an acyclic graph that no longer path implies (its transitive reduction):
    a → c goes when a → b → c is there. The drawing keeps the same order with far fewer arrows."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reachable(start: str, without: tuple[str, str]) -> set[str]:
        seen: set[str] = set()
        todo = [n for n in graph[start] if (start, n) != without]
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
        return seen

    return sorted((a, b) for a in graph for b in graph[a] if b not in reachable(a, (a, b)))


def box_edges(found: Iterable[Import]) -> set[tuple[str, str]]:
    """The module-load imports between boxes (see :func:`box`): a box's own imports, and the bare
    packages (their __init__ holds only a docstring), are left out."""
    pairs = {(box(i.importer), box(i.imported)) for i in found if not i.local}
    return {(a, b) for a, b in pairs if a != b and b not in PACKAGES}


def mermaid(found: Iterable[Import]) -> str:
    """A Mermaid flowchart of the module-load imports between boxes, reduced (the boxes import one
    another in no circle: a reduction of a graph with one would leave out some of its arrows)."""
    edges = reduced(box_edges(found))
    ids = {name: name.replace(".", "_") for edge in edges for name in edge}
    lines = ["flowchart LR"]
    lines += [f'    {ids[name]}["{name}"]' for name in sorted(ids)]
    lines += [f"    {ids[a]} --> {ids[b]}" for a, b in edges]
    return "\n".join(lines)


def page(found: list[Import]) -> str:
    """docs/imports.md: the graph and how to redraw it."""
    return "\n".join([
        "# Imports",
        "",
        "Which part of the project imports which, drawn from the source by "
        "`python -m explorer.devtools.import_graph > docs/imports.md` (redraw it after moving a module).",
        "A box is a subpackage (`explorer.analysis`) or a top-level module (`explorer.build`, `app.panels`);",
        "an arrow points from the importer to what it imports, drawn only where no longer path leads there",
        "already (so a box imports everything below it along the arrows). There are no circles between modules",
        "nor between boxes (no arrow points back up), and a project module is imported at the top of a file,",
        "never inside a function (tests/test_imports.py).",
        "",
        "```mermaid",
        mermaid(found),
        "```",
        "",
    ])


def main() -> int:
    sys.stdout.write(page(imports()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
