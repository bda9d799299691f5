"""The system service: what is running and where."""

from __future__ import annotations

from contracts.base import Event, Reply


class SystemInfo(Reply, kw_only=True):
    version: str
    nats_url: str
    embedded_nats: bool
    data_dir: str
    event_store: str  # "sqlite", "postgresql" or "memory"; never the URL (it may hold a password)
    services_known: list[str]
    services_running: list[str]


class BusReconnected(Event, kw_only=True):
    """A process's NATS connection came back (rote.evt.bus.reconnected, core NATS): a
    request sent to it while it was away may have died with its old server, so a caller
    waiting on one that may be answered again sends it again (services/kernel/bus.py).
    `subjects`: what the process is subscribed to, requests' subjects among them."""

    sender: str  # one per connection: a process ignores its own
    subjects: list[str]
    # The server the connection was on before (its server_id; "" if unknown): a caller
    # that lost the same one knows its own requests since its reconnect never went there.
    lost_server: str = ""
