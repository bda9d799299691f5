"""Runs services: one, several or all of them in one process, on one NATS connection,
under one anyio task group.

A service is a module with `async def serve(ctx, *, task_status)`: it registers its
endpoints and consumers, calls `task_status.started()`, and runs until cancelled.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import TaskGroup

from services.kernel.bus import Bus, ConnectionLost, connect
from services.kernel.embedded_nats import (
    URL_FILE,
    EmbeddedNats,
    EmbeddedNatsError,
    _server_info,
)
from services.kernel.logs import get_logger
from services.kernel.secrets import redact
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams

log = get_logger("rote.runtime")

# Every service rote has, in start order (dependencies first):
# system, llm, tools, compiler, tracer, runner, scheduler.
SERVICE_MODULES: dict[str, str] = {
    "system": "services.system.service",
    "llm": "services.llm.service",
    "tools": "services.tools.service",
    "compiler": "services.compiler.service",
    "tracer": "services.tracer.service",
    "runner": "services.runner.service",
    "scheduler": "services.scheduler.service",
}


# How often a running stack checks that its embedded NATS is still there.
EMBEDDED_CHECK_S = 0.5

# The first and the longest pause between attempts to provision after a reconnect.
PROVISION_RETRY_S = (1.0, 30.0)


class UnknownServiceError(ValueError):
    pass


class AlreadyRunningError(RuntimeError):
    pass


@dataclass
class ServiceContext:
    settings: Settings
    bus: Bus
    task_group: TaskGroup
    services: tuple[str, ...]
    nats_url: str
    embedded_nats: bool


@dataclass
class Stack:
    bus: Bus
    nats_url: str
    embedded: EmbeddedNats | None
    context: ServiceContext


def load_service(name: str) -> Any:
    try:
        module_name = SERVICE_MODULES[name]
    except KeyError:
        known = ", ".join(SERVICE_MODULES)
        raise UnknownServiceError(f"unknown service {name!r} (known: {known})") from None
    return importlib.import_module(module_name)


def url_file(settings: Settings) -> Path:
    return Path(settings.data_dir) / URL_FILE


def lock_embedded(settings: Settings) -> IO[bytes]:
    """Hold the data dir's embedded NATS for this process (released on close, or when
    the process dies). Two `rote up` started together both find no running server: the
    lock keeps the second from running another nats-server on the same JetStream store
    (and, stopping, deleting the first one's nats.url)."""
    path = Path(settings.data_dir) / "nats.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise AlreadyRunningError(
            f"rote is already running (or starting) with an embedded NATS in"
            f" {settings.data_dir}; stop it, or use `rote serve` once it has started"
        ) from None
    return lock


def embedded_name(settings: Settings) -> str:
    """The server_name of the embedded NATS of this data dir: after a crash its
    recorded port may be another server's, and only this name tells them apart."""
    where = str(Path(settings.data_dir).expanduser().resolve())
    return "rote-" + hashlib.sha256(where.encode()).hexdigest()[:16]


def running_embedded_url(settings: Settings) -> str | None:
    """The URL of an embedded server a `rote up` in this data dir is running, if any."""
    path = url_file(settings)
    if not path.exists():
        return None
    url = path.read_text().strip()
    host_port = url.removeprefix("nats://")
    host, _, port = host_port.rpartition(":")
    if not (host and port.isdigit()):
        return None
    info = _server_info(host, int(port))
    if info is not None and info.get("server_name") == embedded_name(settings):
        return url
    return None


async def _stop_when_lost(bus: Bus) -> None:
    await bus.lost.wait()
    raise ConnectionLost(
        f"the NATS connection closed for good ({bus.lost_reason}); stopping, so that a"
        " supervisor can start rote again"
    )


async def _stop_when_embedded_stops(embedded: EmbeddedNats) -> None:
    """The embedded server is our own child: once it is gone nothing brings it back, and
    the connection would try to reach it forever."""
    while True:
        await anyio.sleep(EMBEDDED_CHECK_S)
        if reason := embedded.exit_reason():
            break
    raise EmbeddedNatsError(
        f"the embedded NATS at {embedded.url} stopped ({reason}); stopping, so that a"
        " supervisor can start rote again"
    )


async def _provision_on_reconnect(bus: Bus, replicas: int) -> None:
    """Provision again whenever the connection comes back. A server restarted without
    its JetStream store comes back empty: consumers re-create their own streams, but
    nothing else would re-create the streams only published to, or the buckets (the
    scheduler's lease bucket: it would stay in standby until rote restarts)."""
    while True:
        with bus.until_reconnect():
            await anyio.sleep_forever()
        pause = PROVISION_RETRY_S[0]
        while True:
            try:
                await ensure_streams(bus.js, replicas)
                break
            except Exception as exc:  # JetStream may take a moment to be ready
                log.warning("streams_not_provisioned", error=redact(str(exc)), retry_in_s=pause)
            with bus.until_reconnect():  # or at once when the connection comes back again
                await anyio.sleep(pause)
            pause = min(pause * 2, PROVISION_RETRY_S[1])


@asynccontextmanager
async def open_stack(
    settings: Settings,
    names: list[str] | tuple[str, ...],
    *,
    join_running: bool = True,
    embedded_port: int | None = None,
) -> AsyncIterator[Stack]:
    """Connect (starting an embedded NATS when no URL is configured), provision streams,
    start the named services, and stop all of it on exit."""
    modules = [(name, load_service(name)) for name in names]
    embedded: EmbeddedNats | None = None
    url = settings.nats_url
    if url is None and join_running:
        url = running_embedded_url(settings)
    lock: IO[bytes] | None = None
    if url is None:
        if running_embedded_url(settings):
            raise AlreadyRunningError(
                f"rote is already running with an embedded NATS in {settings.data_dir}"
                f" ({url_file(settings).read_text().strip()}); stop it or use `rote serve`"
            )
        lock = lock_embedded(settings)
    bus: Bus | None = None
    try:
        if lock is not None:
            embedded = EmbeddedNats(
                Path(settings.data_dir) / "nats", port=embedded_port, name=embedded_name(settings)
            )
            embedded.spawn()  # on this (the loop's) thread: see EmbeddedNats.spawn
            await anyio.to_thread.run_sync(embedded.wait_ready)
            url = embedded.url
            url_file(settings).write_text(url + "\n")
        assert url is not None
        bus = await connect(url, name="rote:" + ",".join(names))
        # An embedded server is a single node: it cannot hold more than one replica.
        replicas = 1 if embedded is not None else settings.stream_replicas
        await ensure_streams(bus.js, replicas)
        async with anyio.create_task_group() as tg:
            ctx = ServiceContext(
                settings=settings,
                bus=bus,
                task_group=tg,
                services=tuple(names),
                nats_url=url,
                embedded_nats=embedded is not None,
            )
            tg.start_soon(_stop_when_lost, bus)
            if embedded is not None:
                tg.start_soon(_stop_when_embedded_stops, embedded)
            tg.start_soon(_provision_on_reconnect, bus, replicas)
            for name, module in modules:
                await tg.start(module.serve, ctx)
                log.info("service_started", service=name)
            yield Stack(bus=bus, nats_url=url, embedded=embedded, context=ctx)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if bus is not None:
                await bus.close()
            if embedded is not None:
                await anyio.to_thread.run_sync(embedded.stop)
            if lock is not None:
                url_file(settings).unlink(missing_ok=True)
                lock.close()
