"""Finds running micro services, and their counts, through the $SRV control subjects."""

from __future__ import annotations

import json
from typing import Any

import anyio

from services.kernel.bus import Bus


async def gather(bus: Bus, subject: str, *, wait_s: float = 0.5) -> list[dict[str, Any]]:
    """Publish one request and collect every reply that arrives within `wait_s`:
    a control subject is answered by every service instance, not just one."""
    inbox = bus.nc.new_inbox()
    replies: list[dict[str, Any]] = []
    sub = await bus.nc.subscribe(inbox)
    try:
        await bus.nc.publish(subject, b"", reply=inbox)
        with anyio.move_on_after(wait_s):
            async for msg in sub.messages:
                try:
                    replies.append(json.loads(msg.data))
                except ValueError:
                    continue
    finally:
        await sub.unsubscribe()
    return replies


async def service_infos(bus: Bus, *, wait_s: float = 0.5) -> list[dict[str, Any]]:
    infos = await gather(bus, "$SRV.INFO", wait_s=wait_s)
    return sorted(infos, key=lambda i: (i.get("name", ""), i.get("id", "")))


async def service_stats(bus: Bus, *, wait_s: float = 0.5) -> list[dict[str, Any]]:
    """Each instance's requests, errors and time spent, per endpoint."""
    return await gather(bus, "$SRV.STATS", wait_s=wait_s)
