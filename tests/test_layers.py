"""The layering ARCHITECTURE.md describes is the one the imports follow (issue 32).

Every module of the package has a row in the table; a module imports only from its own layer
and the layers listed before it; and no modules import each other in a circle. Imports made
inside functions and for type checking count too: a lazy import still ties two modules, and
a type-only circle still means neither can be read without the other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "picochat"



def layers() -> tuple[list[str], dict[str, str]]:
    """The table's layers in order, and the layer of each module or folder it names."""
    text = (PACKAGE / "ARCHITECTURE.md").read_text(encoding="utf-8")
    order: list[str] = []
    where: dict[str, str] = {}
    for name, modules in re.findall(r"^\| (\w[\w ]*?) \| (.+?) \| .*\|$", text, re.M):
        if name == "Layer":
            continue
        order.append(name)
        for module in re.findall(r"`([\w/.]+)`", modules):
            where[module] = name
    return order, where


def layer_of(module: str, where: dict[str, str]) -> str | None:
    return where.get(module) or where.get(module.split("/")[0] + "/")


def imports() -> dict[str, set[str]]:
    """Each module (a path under picochat/) and the package modules it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[list[str]] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("picochat"):
                base = node.module.split(".")[1:]
                names = [base + [a.name] for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1:] for a in node.names
                         if a.name.startswith("picochat.")]
            for parts in names:
                if parts and PACKAGE.joinpath(*parts).with_suffix(".py").is_file():
                    deps.add("/".join(parts) + ".py")
        deps.discard(module)
        found[module] = deps
    return found


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(frozenset(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def plain(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without package `__init__` files (they gather, they do not depend)."""
    return {m: {d for d in deps if not d.endswith("__init__.py")}
            for m, deps in graph.items() if not m.endswith("__init__.py")}


def test_every_module_has_a_row_in_the_architecture_table():
    _, where = layers()
    homeless = [m for m in imports() if not m.endswith("__init__.py")
                and m != "__main__.py" and layer_of(m, where) is None]
    assert homeless == []


def test_no_module_imports_from_a_layer_listed_after_its_own():
    order, where = layers()
    rank = {name: i for i, name in enumerate(order)}
    upward = [f"{m} ({layer_of(m, where)}) imports {d} ({layer_of(d, where)})"
              for m, deps in imports().items() for d in sorted(deps)
              if layer_of(m, where) and layer_of(d, where)
              and rank[layer_of(d, where)] > rank[layer_of(m, where)]]
    assert upward == []


def test_no_circle_of_imports():
    assert [sorted(c) for c in circles(plain(imports()))] == []


def test_the_app_reads_and_writes_through_the_session_layer():
    """No TUI module touches the store: the worker and the session catalog read and write,
    on the store's thread, so a locked database or a long history never freezes the keys.
    The app names `Store` only to wrap the one it is given."""
    found = []
    for path in sorted((PACKAGE / "tui").glob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("store", "_store"):
                found.append(f"{module}:{node.lineno} .{node.attr}")
            if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "picochat.storage") and not (module == "tui/app.py"
                                                 and [a.name for a in node.names] == ["Store"])):
                found.append(f"{module}:{node.lineno} imports {node.module}")
    assert found == []


def test_the_checks_see_an_upward_import_and_a_circle():
    """The checks themselves: a storage module importing the session layer is upward, and
    two modules importing each other are a circle."""
    order, where = layers()
    rank = {name: i for i, name in enumerate(order)}
    assert rank[layer_of("session.py", where)] > rank[layer_of("storage/store.py", where)]
    assert circles({"a.py": {"b.py"}, "b.py": {"a.py"}, "c.py": {"a.py"}}) == [
        frozenset({"a.py", "b.py"})]
    graph = imports()
    assert "storage/store.py" in graph["session.py"]  # it reads real imports
    assert "session.py" in graph["cli/commands.py"] or "session.py" in graph["tui/app.py"]
