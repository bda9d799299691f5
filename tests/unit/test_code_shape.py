"""The code keeps a readable shape: no module of contracts/ or services/ over 600 lines
and no function over 80, so one idea fits on a screen or two."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def sources() -> list[Path]:
    return sorted(
        path
        for folder in ("contracts", "services")
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def long_functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append((node.name, length))
    return found


def test_no_module_is_over_the_limit() -> None:
    over = {
        str(path.relative_to(ROOT)): lines
        for path in sources()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert over == {}


def test_no_function_is_over_the_limit() -> None:
    over = {
        f"{path.relative_to(ROOT)}:{name}": lines
        for path in sources()
        for name, lines in long_functions(path)
    }
    assert over == {}


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    path = tmp_path / "long.py"
    path.write_text("def f() -> None:\n" + "    pass\n" * 80)
    assert long_functions(path) == [("f", 81)]
