"""Shared start-up for CLI commands: settings, logging, secrets, a friendly failure."""

from __future__ import annotations

import sys

from services.kernel.logs import configure_logging
from services.kernel.secrets import register_from_env
from services.kernel.settings import Settings, SettingsError


def load_settings() -> Settings:
    register_from_env()
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"rote: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(settings.log_format, settings.log_level)
    return settings
