"""Where eventsourcing applications keep their events.

ROTE_EVENT_STORE selects the store for every event-sourced service:
  sqlite (default)      one file per application under <data_dir>/events/
  memory                shared-cache in-memory SQLite (tests; safe across threads)
  postgresql://...      PostgreSQL; each application gets its own tables
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from eventsourcing.persistence import IntegrityError, InternalError, ProgrammingError

from services.kernel.logs import get_logger
from services.kernel.settings import Settings, SettingsError

log = get_logger("rote.event_store")

A = TypeVar("A")

# Tries at opening an application while another process creates the same tables.
OPEN_ATTEMPTS = 6
# The options a postgresql:// URL takes: the library setting each sets, its default, and
# the least whole number it may be (None: text).
URL_OPTIONS: dict[str, tuple[str, str | None, int | None]] = {
    "connect_timeout": ("POSTGRES_CONNECT_TIMEOUT", "10", 1),
    "lock_timeout": ("POSTGRES_LOCK_TIMEOUT", "5", 0),
    "pool_size": ("POSTGRES_POOL_SIZE", "5", 1),
    "schema": ("POSTGRES_SCHEMA", None, None),
}


def application_env(settings: Settings, app_name: str) -> dict[str, str]:
    """The eventsourcing environment for one application (passed as `env=`)."""
    kind = settings.event_store_kind
    if kind == "memory":
        # Plain ":memory:" is one database per connection; eventsourcing uses a
        # connection per thread, so a named shared-cache database is required.
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": f"file:rote_{app_name}_{id(settings)}?mode=memory&cache=shared",
            "SQLITE_LOCK_TIMEOUT": "10",
        }
    if kind == "sqlite":
        folder = Path(settings.data_dir) / "events"
        folder.mkdir(parents=True, exist_ok=True)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(folder / f"{app_name}.sqlite"),
            "SQLITE_LOCK_TIMEOUT": "10",
        }
    env = postgres_env(settings.event_store)
    # The library's database-function insert takes no table lock, so notification ids
    # could commit out of order and the relay, reading on from the highest it has seen,
    # would skip one for good. Set for the prefixed name too, which would win.
    for name in (
        "POSTGRES_ENABLE_DB_FUNCTIONS",
        f"{app_name.upper()}_POSTGRES_ENABLE_DB_FUNCTIONS",
    ):
        env[name] = "n"
    return env


def postgres_env(url: str) -> dict[str, str]:
    """The library's settings from a postgresql:// URL. An option it does not know is
    refused, not passed over (`sslmode=require` would quietly connect unencrypted)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
        parsed = False
    else:
        # An `@` past the host: the password's `#`, `/` or `?` ended the host part early.
        parsed = not parts.fragment and "@" not in parts.path + parts.query
    if not parsed:
        # Not the parser's message: it quotes what it took for the port, which is then
        # the start of the password.
        raise SettingsError(
            "ROTE_EVENT_STORE: not a usable PostgreSQL URL (USER:PASSWORD@HOST:PORT does "
            "not parse); percent-encode reserved characters in the password: # as %23, "
            "/ as %2F, ? as %3F, @ as %40, : as %3A"
        )
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": unquote(parts.path.lstrip("/")) or "rote",
        "POSTGRES_HOST": parts.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(port or 5432),
        "POSTGRES_USER": unquote(parts.username or "postgres"),
        "POSTGRES_PASSWORD": _password(parts.password),
    }
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    for name in query:
        if name not in URL_OPTIONS:
            raise SettingsError(
                f"ROTE_EVENT_STORE: unknown option {name!r} (known: {', '.join(URL_OPTIONS)})"
            )
    for name, (key, default, least) in URL_OPTIONS.items():
        value = query.get(name, default)
        if value is None:
            continue
        if least is not None and not _whole_number(value, least):
            raise SettingsError(
                f"ROTE_EVENT_STORE: {name} must be a whole number, {least} or more, got {value!r}"
            )
        env[key] = value
    return env


def _password(given: str | None) -> str:
    """The URL's password; with none, PGPASSWORD's, as libpq would take it. The library
    always passes a password on, and an empty one hides PGPASSWORD from libpq (which
    still reads ~/.pgpass for it)."""
    if given is not None:
        return unquote(given)
    return os.environ.get("PGPASSWORD", "")


def _whole_number(text: str, least: int) -> bool:
    try:
        return int(text) >= least
    except ValueError:
        return False


def open_application(factory: Callable[[], A], name: str) -> A:
    """The application `factory` builds (blocking: call it in a thread). Processes
    starting together on an empty PostgreSQL schema each create the tables, and
    PostgreSQL's CREATE ... IF NOT EXISTS is not safe against a concurrent one: the
    loser fails (a duplicate type, "tuple concurrently updated"). By the next try the
    tables exist, so it is tried again, a little later each time."""
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            return factory()
        except (IntegrityError, InternalError, ProgrammingError) as exc:
            if attempt == OPEN_ATTEMPTS:
                raise
            log.warning(
                "event_store_open_retried", application=name, attempt=attempt, error=str(exc)
            )
            time.sleep(0.1 * attempt + random.uniform(0, 0.1))
    raise AssertionError("unreachable")
