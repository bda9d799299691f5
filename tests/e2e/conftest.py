"""The whole stack in one process over a real NATS: the stand-in model over HTTP
(through the real anthropic SDK), real Chromium, the local demo site."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from services.dev.demo.site import DemoSite
from services.dev.standin.server import StandinServer
from services.kernel.runtime import Stack, open_stack
from services.kernel.settings import Settings


@pytest.fixture
def site() -> Iterator[DemoSite]:
    with DemoSite() as demo:
        yield demo


@dataclass
class Rig:
    stack: Stack
    site: DemoSite
    standin: StandinServer
    settings: Settings


@pytest.fixture
def stack_settings(settings: Settings) -> Settings:
    # Short ack wait so a killed runner's run is redelivered within the test.
    return settings.with_(runner_ack_wait_s=3.0, replay_backoff_s=0.2, event_store="sqlite")


@pytest.fixture
async def rig(
    stack_settings: Settings, site: DemoSite, standin: StandinServer
) -> AsyncIterator[Rig]:
    names = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        yield Rig(stack=stack, site=site, standin=standin, settings=stack_settings)


@pytest.fixture
def rig_parts(stack_settings: Settings, site: DemoSite, standin: StandinServer) -> Rig:
    """The site and stand-in without a stack, for tests that start their own."""
    return Rig(stack=None, site=site, standin=standin, settings=stack_settings)  # type: ignore[arg-type]
