"""Identifiers that are also NATS subject tokens: no dots, no wildcards, no spaces."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime

_NOT_TOKEN = re.compile(r"[^a-z0-9_-]+")
MAX_TOKEN = 64


def slug(name: str) -> str:
    """A task id from a human name: `"Check ACME price!"` -> `"check-acme-price"`."""
    token = _NOT_TOKEN.sub("-", name.lower()).strip("-_")[:MAX_TOKEN].strip("-_")
    if token:
        return token
    return "task-" + hashlib.sha256(name.encode()).hexdigest()[:12]


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique by a random suffix: `20250101T090000-3f2a9c1b7e40`."""
    at = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
