"""Shared start-up for CLI commands: settings, logging, secrets, a friendly failure."""

from __future__ import annotations

import os
import sys

from services.kernel.logs import configure_logging
from services.kernel.secrets import register_from_env
from services.kernel.settings import Settings, SettingsError


def load_settings(*, quiet: bool = False) -> Settings:
    """`quiet`: commands that print their own story (demo, bench) log warnings only,
    unless ROTE_LOG_LEVEL asks for more."""
    register_from_env()
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"rote: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    level = settings.log_level
    if quiet and "ROTE_LOG_LEVEL" not in os.environ:
        level = "warning"
    configure_logging(settings.log_format, level)
    return settings
