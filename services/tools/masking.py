"""A tool call's result with the secrets it shows masked, for its reply and its event."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import msgspec

from contracts.errors import ErrorInfo
from contracts.tools import ToolMetadata, ToolResult
from services.kernel.secrets import redact, redact_struct, redact_value


def _masked_error(error: ErrorInfo | None, *, query: bool = True) -> ErrorInfo | None:
    """A tool failure's error with secrets masked: messages quote what the call was
    given ("cannot open https://user:pw@host/")."""
    if error is None:
        return None
    masked = redact_struct(error, query=query)
    if masked is None:  # ErrorInfo has no constraints to break; never so, but typed
        return ErrorInfo(code=error.code, message=redact(error.message, query=query))
    return masked


async def _redacted(output: Any, *, query: bool) -> Any:
    if output is None or isinstance(output, int | float | bool):
        return output
    if len(msgspec.json.encode(output)) < 64 * 1024:
        return redact_value(output, query=query)
    # A bounded output is at most a few hundred KB: linear, but keep the loop free.
    return await anyio.to_thread.run_sync(partial(redact_value, output, query=query))


async def masked(result: ToolResult, *, query: bool) -> ToolResult:
    """`result` (changed in place) with secrets masked in its output, metadata (the
    page's URL keeps a password it was opened with) and error; with `query`, credential
    query parameters too (see `redact`)."""
    result.output = await _redacted(result.output, query=query)
    result.metadata = redact_struct(result.metadata, query=query) or ToolMetadata()
    result.error = _masked_error(result.error, query=query)
    return result
