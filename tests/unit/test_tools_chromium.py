"""Which Chromium the tools service launches, and with which flags."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.tools.chromium import CHROMIUM_ARGS, chromium_candidates, launch_args


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_playwrights_own_first_then_configured_then_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = _exe(tmp_path / "ms-playwright" / "chrome")
    system = _exe(tmp_path / "bin" / "chromium")
    monkeypatch.setenv("PATH", str(system.parent))
    assert chromium_candidates(str(own), "/opt/chromium") == [None, "/opt/chromium", str(system)]


def test_without_playwrights_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = _exe(tmp_path / "bin" / "chromium-browser")
    monkeypatch.setenv("PATH", str(system.parent))
    assert chromium_candidates(str(tmp_path / "missing"), None) == [str(system)]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert chromium_candidates(None, None) == []


def test_headless_flags_keep_the_network_quiet() -> None:
    args = launch_args()
    for flag in (
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ):
        assert flag in args
    assert set(CHROMIUM_ARGS) <= set(args)
    assert ("--no-sandbox" in args) == (os.geteuid() == 0)
