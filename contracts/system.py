"""The system service: what is running and where."""

from __future__ import annotations

from contracts.base import Reply


class SystemInfo(Reply, kw_only=True):
    version: str
    nats_url: str
    embedded_nats: bool
    data_dir: str
    event_store: str  # "sqlite", "postgresql" or "memory"; never the URL (it may hold a password)
    services_known: list[str]
    services_running: list[str]
