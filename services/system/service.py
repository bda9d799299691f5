"""rote.api.system.info: version, NATS URL, data dir, event store kind, services."""

from __future__ import annotations

import anyio
from anyio.abc import TaskStatus

from contracts import subjects
from contracts.base import Empty
from contracts.system import SystemInfo
from services import __version__
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.runtime import SERVICE_MODULES, ServiceContext
from services.kernel.secrets import redact


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    async def info(_: Empty) -> SystemInfo:
        return SystemInfo(
            version=__version__,
            nats_url=redact(ctx.nats_url),
            embedded_nats=ctx.embedded_nats,
            data_dir=str(ctx.settings.data_dir),
            event_store=ctx.settings.event_store_kind,
            services_known=list(SERVICE_MODULES),
            services_running=list(ctx.services),
        )

    service = await start_service(
        ctx.bus,
        name="rote-system",
        version=__version__,
        description="What rote is running, where, and on which stores",
        endpoints=[Endpoint("info", subjects.SYSTEM_INFO, Empty, info, description="system info")],
        task_group=ctx.task_group,
    )
    task_status.started()
    try:
        await anyio.sleep_forever()
    finally:
        await stop_service(service)
