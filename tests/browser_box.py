"""Browser tools called in-process, as the tools service calls them: one ToolBox over a
warm BrowserPool, one run ("run-a"), for tests of what each tool does on a page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.tools import ExecTool, ToolResult
from services.tools.browser import BrowserConfig, BrowserPool
from services.tools.limits import BrowserLimits
from services.tools.session import Session
from services.tools.specs import SPECS
from services.tools.toolbox import ToolBox, ToolsConfig

RUN_ID = "run-a"


@dataclass
class Browser:
    box: ToolBox

    async def __call__(self, tool: str, timeout_s: float = 10.0, **input: Any) -> ToolResult:
        call = ExecTool(
            run_id=RUN_ID,
            task_id="task-1",
            allowed_tools=list(SPECS),
            tool=tool,
            input=input,
            timeout_s=timeout_s,
        )
        return await self.box.execute(call)

    @property
    def session(self) -> Session:
        assert self.box.browsers is not None
        return self.box.browsers.sessions[RUN_ID]


@asynccontextmanager
async def open_browser(tmp_path: Path, **limits: Any) -> AsyncIterator[Browser]:
    """A ToolBox on one warm context; `limits`: BrowserLimits fields to change."""
    config = ToolsConfig(
        data_dir=tmp_path,
        browser=BrowserConfig(pool_size=1),
        limits=BrowserLimits(screenshot_dir=tmp_path / "blobs", **limits),
    )
    async with BrowserPool(config.browser) as pool:
        await pool.wait_warm()  # Chromium's start is not a call's to wait for
        yield Browser(ToolBox(config, pool))


def error_of(result: ToolResult) -> tuple[str, str]:
    assert not result.ok and result.error is not None, result
    return result.error.code, result.error.message
