"""Shared start-up for CLI commands: settings, logging, secrets, a friendly failure."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import nats.errors
import nats.js.errors
from eventsourcing.persistence import PersistenceError

from services.kernel.logs import configure_logging
from services.kernel.runtime import running_embedded_url
from services.kernel.secrets import redact, register_from_env, register_url_credentials
from services.kernel.settings import Settings, SettingsError, nats_url_problem

T = TypeVar("T")

# A failure's message is shown on one line, cut to this length.
MAX_MESSAGE = 500
# JetStream's error code for a stream asked for more than one replica on a server that
# is not part of a cluster ("replicas > 1 not supported in non-clustered mode").
NOT_CLUSTERED = 10074


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


def data_dir_problem(path: Path, what: str = "ROTE_DATA_DIR") -> str | None:
    """Why `path` cannot hold rote's data (None: it can; it is created if missing).

    Checked before anything starts: found later, the same problem surfaces as an
    OSError deep inside whichever service touched the directory first."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"{what} {path} is not a directory"
    except OSError as exc:
        return f"{what} {path} cannot be created: {exc.strerror or exc}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{what} {path} is not writable"
    return None


def write_files(directory: Path, files: dict[str, str]) -> str | None:
    """Write each name -> text into `directory` (already checked by `data_dir_problem`);
    None, or why one file could not be written (a read-only file of another user, a
    directory in its place, a full disk)."""
    for name, text in files.items():
        path = directory / name
        try:
            path.write_text(text)
        except OSError as exc:
            return f"cannot write {path}: {exc.strerror or exc}"
    return None


def _checked(
    parse: Callable[[str], T], noun: str, ok: Callable[[T], bool], rule: str
) -> Callable[[str], T]:
    """An argparse type: `parse` the text, then hold it to `ok` (else `rule`)."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{rule}, not {text}")
        return value

    return convert


# A --port: 0 (any free port) to 65535.
port = _checked(int, "port number", lambda v: 0 <= v <= 65535, "a port is 0 to 65535")
# A wait or timeout in seconds: above 0 (NaN fails too).
positive_seconds = _checked(float, "number of seconds", lambda v: v > 0, "must be above 0 seconds")


def first_error(exc: BaseException) -> BaseException:
    """The first leaf of (possibly nested) exception groups: task groups wrap whatever
    stopped a service, sometimes twice."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def last_error(errors: list[str]) -> str:
    """The last connection error a one-shot command saw, to end its message with."""
    return f" (last error: {errors[-1]})" if errors else ""


def replicas_problem(exc: BaseException, replicas: int, fix: str) -> str | None:
    """What to do when NATS refused `replicas` because it is a single server; None for
    any other failure. `fix`: how to ask for one replica instead."""
    exc = first_error(exc)
    if not (isinstance(exc, nats.js.errors.APIError) and exc.err_code == NOT_CLUSTERED):
        return None
    return (
        f"streams with {replicas} replicas need a JetStream cluster of at least {replicas}"
        " servers, and this NATS is a single server that is not clustered: run a cluster"
        f" (infra/nats/cluster/, see infra/README.md) or use {fix} on a single server"
    )


def describe_failure(exc: BaseException, settings: Settings) -> str:
    """One masked line saying what failed, for `rote: ...` on stderr."""
    exc = first_error(exc)
    message = str(exc).strip()
    if isinstance(exc, PersistenceError):
        text = f"event store {settings.event_store}: {message or type(exc).__name__}"
    elif problem := replicas_problem(exc, settings.stream_replicas, "ROTE_STREAM_REPLICAS=1"):
        text = problem
    elif isinstance(exc, nats.js.errors.APIError):
        text = f"NATS JetStream refused a request: {exc.description or message}"
    elif isinstance(exc, nats.errors.Error) or type(exc).__module__.startswith("services."):
        # rote's own errors (and the NATS client's) are written to be read as they are.
        text = message or type(exc).__name__
    else:
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = " ".join(redact(text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def nats_to_ask(given: str | None) -> str | int:
    """The NATS a client command asks: `given` (--nats-url), else ROTE_NATS_URL, else the
    running embedded one; or, when there is none or it is malformed, the exit code, the
    reason said on stderr."""
    settings = load_settings()
    url = given or settings.nats_url or running_embedded_url(settings)
    register_url_credentials(url)  # --nats-url: masked like ROTE_NATS_URL
    if url is None:
        print(
            f"rote: nothing running (no ROTE_NATS_URL, no embedded NATS in {settings.data_dir})",
            file=sys.stderr,
        )
        return 1
    if problem := nats_url_problem(url):
        print(f"rote: {redact(problem)}", file=sys.stderr)
        return 2
    return url
