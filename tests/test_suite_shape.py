"""The suite's own shape (issue 32, item 5): what test files share lives in tests/helpers and
their fixtures in conftest.py, so no test file imports another, and a test file can be read,
moved or deleted on its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _is_test_module(name: str) -> bool:
    """`tests.test_x`, `tests.reliability.test_x`, or a conftest: a test file, not a helper."""
    parts = name.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def imported_test_modules(source: str, module: str) -> list[str]:
    """The test modules that `source`, the text of `module`, imports anywhere: at the top or
    inside a function, by name or relatively, as `from tests import test_x`, or through
    importlib."""
    package = module.rpartition(".")[0].split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps up
                parent = package[:len(package) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("import_module", "importlib.import_module",
                                             "__import__")):
            names = [node.args[0].value]
        found += [name for name in names if _is_test_module(name) and name != module]
    return found


def test_no_test_file_conftest_or_helper_imports_a_test_module() -> None:
    # the check sees each way a test module can be imported
    for text in ("from tests.test_tui import SIZE", "import tests.real.test_real_overflow",
                 "from tests import test_tui", "from tests.conftest import CliResult",
                 "def f():\n    from tests.reliability.test_signals import Terminal",
                 "from .test_tui import say", "importlib.import_module('tests.test_tui')"):
        assert imported_test_modules(text, "tests.test_other"), text
    for text in ("from tests.helpers.tui import SIZE, make_app", "from tests import helpers",
                 "from tests.fixtures import realistic_chat", "from . import helpers"):
        assert not imported_test_modules(text, "tests.test_other"), text

    files = [*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py"),
             *(TESTS / "helpers").rglob("*.py")]
    assert len(files) > 90
    offending = {}
    for path in files:
        module = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
        imported = imported_test_modules(path.read_text(encoding="utf-8"), module)
        if imported:
            offending[str(path.relative_to(TESTS.parent))] = imported
    assert offending == {}, "move what they share to tests/helpers (fixtures to conftest.py)"
