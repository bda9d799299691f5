"""Which Chromium to launch, and with what arguments."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Headless with nothing running in the background: no update checks, sync, safe
# browsing lists or field trials (a closed network would see them retried forever).
CHROMIUM_ARGS: tuple[str, ...] = (
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--disable-features=Translate,OptimizationHints,MediaRouter,CalculateNativeWinOcclusion",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--no-first-run",
    "--no-pings",
    "--safebrowsing-disable-auto-update",
    "--password-store=basic",
)


def chromium_candidates(playwright_path: str | None, configured: str | None) -> list[str | None]:
    """Executables to try, in order: Playwright's own (None: let Playwright pick), then
    ROTE_CHROMIUM, then a system chromium."""
    found: list[str | None] = []
    if playwright_path and Path(playwright_path).exists():
        found.append(None)
    if configured:
        found.append(configured)
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path and path not in found:
            found.append(path)
    return found


def launch_args() -> list[str]:
    args = list(CHROMIUM_ARGS)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to sandbox as root
    return args
