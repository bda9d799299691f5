"""The service boundaries in pyproject.toml ([tool.importlinter]) hold, and they catch a
service importing another: checked on the tree as it is, and on a copy of it with one
forbidden import planted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # The tree under test first on the path, so its packages are the ones analysed.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def copy_tree(to: Path) -> Path:
    for name in ("contracts", "services"):
        shutil.copytree(ROOT / name, to / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


def test_the_tree_keeps_every_boundary() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        (
            "services/runner/planted.py",
            "from services.compiler import health\n",
            "services.runner is not allowed to import services.compiler",
        ),
        (
            "services/scheduler/planted.py",
            "def later() -> None:\n    from services.tools import policy\n",
            "services.scheduler is not allowed to import services.tools",
        ),
        (
            "services/kernel/planted.py",
            "from services.dev.standin import policy\n",
            "services.kernel is not allowed to import services.dev",
        ),
        (
            "services/executor/planted.py",
            "import anyio\n",
            "services.executor is not allowed to import anyio",
        ),
        (
            "contracts/planted.py",
            "from services.kernel import codec\n",
            "contracts is not allowed to import services",
        ),
    ],
    ids=["service-to-service", "lazy-import", "product-to-dev", "impure-executor", "contracts"],
)
def test_a_planted_forbidden_import_fails_the_check(
    tmp_path: Path, module: str, planted: str, broken: str
) -> None:
    tree = copy_tree(tmp_path)
    (tree / module).write_text(planted)
    done = lint_imports(tree)
    assert done.returncode != 0
    assert broken in done.stdout, done.stdout
