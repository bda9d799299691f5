"""What a tool implementation hands back: its output and metadata, or a failure the
model should see (ok=false), as opposed to a refusal (ServiceError)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.tools import ToolMetadata


@dataclass
class Outcome:
    output: Any
    metadata: ToolMetadata = field(default_factory=ToolMetadata)
    truncated: bool = False


class ToolFailure(Exception):
    """The tool ran and failed (selector matched nothing, navigation error, timeout).
    Becomes ToolResult(ok=false, error={code, message}); `output`/`metadata` keep what
    is known anyway (partial command output, the URL the page is on)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        output: Any = None,
        metadata: ToolMetadata | None = None,
        truncated: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.output = output
        self.metadata = metadata or ToolMetadata()
        self.truncated = truncated
