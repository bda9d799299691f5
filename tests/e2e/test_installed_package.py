"""`rote demo` and `rote bench --quick` from a fresh, NON-editable install of rote's wheel.

The wheel is built offline from a copy of this checkout with the venv's own build backend
(pyproject.toml's dev extras hold it), installed into a new venv with --no-deps, and run
from a directory outside the checkout with PYTHONPATH unset: whatever the demo, the
stand-in or the bench read at run time that the wheel lacks fails here, not on a user's
machine. The new venv borrows the test venv's dependencies through a .pth file listing
its site-packages: a plain path line puts that directory on sys.path, but the .pth files
inside it (the editable install's finder among them) are not run, so rote itself can
only come from the wheel, which the test checks before running anything.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import DEMO_SOURCES, DEMO_VERSIONS, measured

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# What the build reads: the packaging config, the readme it names, and the packages.
SOURCES = ["pyproject.toml", "README.md", "contracts", "services"]
# Every section `rote bench --quick` runs.
BENCH_SECTIONS = {
    "cost",
    "drift",
    "overhead",
    "journal",
    "throughput",
    "executor_health",
    "browser_acquire",
}


def _run(
    command: list[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
        check=False,
    )


def _build_wheel(tmp_path: Path) -> Path:
    """rote's wheel, built from a copy of the checkout (the build leaves build/ and
    *.egg-info behind, which belong in no checkout) without the network."""
    probe = _run([sys.executable, "-c", "import setuptools.command.bdist_wheel"])
    if probe.returncode != 0:
        why = (
            f"{sys.executable} has no build backend that makes wheels (setuptools>=77, "
            "in the dev extras): reinstall with `infra/dev` or pip install -e '.[dev]'"
        )
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    source = tmp_path / "source"
    source.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=junk)
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    built = _run([*command, "--no-index", "--disable-pip-version-check", "-w", wheels, source])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = wheels.glob("rote-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A new venv holding the wheel, and its site-packages. Installed in the user's
    environment: with the checkout on PYTHONPATH (and an egg-info left in it by some
    build), pip would take rote as installed already."""
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], env=env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    installed = _run([*pip, "install", "--no-deps", "--no-index", wheel], env=env)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    where = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env
    )
    purelib = Path(where.stdout.strip())
    # The dependencies, not rote: the editable finder's own .pth in there is not run.
    (purelib / "test-venv-dependencies.pth").write_text(
        "".join(f"{path}\n" for path in site.getsitepackages())
    )
    return venv, purelib


def _environment(tmp_path: Path) -> dict[str, str]:
    """The user's environment: no PYTHONPATH (nor any other PYTHON* setting), no rote
    or Anthropic settings but the Chromium the tests use (ROTE_CHROMIUM, else
    Playwright's or the system's, found as the tests find it through HOME and PATH)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ROTE_", "ANTHROPIC_"))
    }
    if os.environ.get("ROTE_CHROMIUM"):
        env["ROTE_CHROMIUM"] = os.environ["ROTE_CHROMIUM"]
    env["ROTE_DATA_DIR"] = str(tmp_path / "data")
    return env


def test_demo_and_bench_run_from_an_installed_wheel(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    env = _environment(tmp_path)
    venv, purelib = _venv_with(wheel, tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not elsewhere.resolve().is_relative_to(REPO)

    # rote, its contracts and the dev code come from the wheel; the dependencies from the
    # test venv.
    where = _run(
        [
            venv / "bin" / "python",
            "-c",
            "import json, anyio, contracts, services, services.dev.bench.bench_health as h; "
            "print(json.dumps([services.__file__, contracts.__file__, h.TRACE.as_posix(), "
            "h.TRACE.is_file(), anyio.__file__]))",
        ],
        cwd=elsewhere,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    services_at, contracts_at, trace, trace_shipped, anyio_at = json.loads(where.stdout)
    for path in (services_at, contracts_at, trace):
        assert Path(path).is_relative_to(purelib), path
        assert not Path(path).resolve().is_relative_to(REPO), path
    assert trace_shipped, "the health bench's trace is missing from the wheel"
    assert not Path(anyio_at).is_relative_to(purelib)

    demo = _run([venv / "bin" / "rote", "demo", "--json"], timeout=300, cwd=elsewhere, env=env)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    summary = json.loads(demo.stdout[demo.stdout.index("\n{") + 1 :])
    runs = summary["runs"]
    assert [r["source"] for r in runs] == DEMO_SOURCES
    assert [r["executor_version"] for r in runs] == DEMO_VERSIONS
    assert summary["versions"] == [1, 2, 3]
    assert all(r["status"] == "completed" for r in runs)
    assert all(r["result"].startswith("Top 3 headlines:\n1. ") for r in runs)
    assert 0 < summary["total_cost_usd"] < summary["all_full_cost_usd"]

    # The whole quick bench: each section runs in its own interpreter (`python -m
    # services.cli`), and the throughput section starts services as processes of their own.
    out = tmp_path / "bench.json"
    command = [venv / "bin" / "rote", "bench", "--quick", "--output", out]
    bench = _run(command, timeout=900, cwd=elsewhere, env=env)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["quick"] is True
    assert set(document["sections"]) == BENCH_SECTIONS
    # No checkout holds the code that ran: no commit to name.
    assert document["machine"]["commit"] is None
    for name, section in document["sections"].items():
        assert section["metrics"], name
        assert all(measured(m) for m in section["metrics"]), name
    # As in test_bench_quick: the cost targets are ratios, met on any machine.
    cost = document["sections"]["cost"]["metrics"]
    targeted = [m for m in cost if m["target"] is not None]
    assert len(targeted) >= 4 and all(m["ok"] is True for m in targeted), targeted
    throughput = document["sections"]["throughput"]["metrics"]
    served = next(m for m in throughput if m["name"] == "runs served by replay")
    assert served["value"] == 100
