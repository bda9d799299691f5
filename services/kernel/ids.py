"""Identifiers that are also NATS subject tokens: no dots, no wildcards, no spaces."""

from __future__ import annotations

import re
import secrets
import time

_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")


def new_id(prefix: str) -> str:
    """Time-ordered and unique: `<prefix>_<ms since epoch, base36><random>`."""
    millis = int(time.time() * 1000)
    stamp = ""
    while millis:
        millis, digit = divmod(millis, 36)
        stamp = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + stamp
    return f"{prefix}_{stamp}{secrets.token_hex(4)}"


def new_run_id() -> str:
    return new_id("run")


def slug(name: str, max_length: int = 48) -> str:
    """A subject-safe id from a human name ("Top headlines!" -> "top-headlines")."""
    token = _NOT_TOKEN.sub("-", name.strip().lower()).strip("-")[:max_length].strip("-")
    return token or new_id("task")
