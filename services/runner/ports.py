"""What a run needs from the rest of rote, as plain async callables.

The agent loop and the replay are written against these, so they can be read and
tested without NATS; adapters.py supplies implementations that call the llm, tools and
compiler services over the bus.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from contracts.executors import ActiveExecutor
from contracts.llm import CompleteReply, CompleteRequest, TextEvent, ToolDefinition
from contracts.runs import RunEvent
from contracts.tasks import TaskSpec
from contracts.tools import CallStatus, CallStatusQuery, ExecTool, ToolResult
from services.runner.transcript import TranscriptRecorder

if TYPE_CHECKING:
    from services.runner.effects import RunEffects

# NATS' default max_payload (1 MB), and what infra/nats configures.
DEFAULT_MAX_PAYLOAD = 1024 * 1024


class PortError(Exception):
    """A call to another service failed (it answered an error or did not answer)."""

    def __init__(self, code: str, message: str, billed: CompleteReply | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        # A model call that failed after the API billed it (a reply rote cannot read):
        # its usage and cost, so the run's ledger still counts what it spent.
        self.billed = billed


@dataclass(frozen=True)
class Ports:
    complete: Callable[[CompleteRequest], Awaitable[CompleteReply]]
    exec_tool: Callable[[ExecTool], Awaitable[ToolResult]]
    list_tools: Callable[[list[str]], Awaitable[list[ToolDefinition]]]
    publish_text: Callable[[TextEvent], Awaitable[None]]
    # The executor to replay for a task (None: the compiler has none, or cannot say).
    active_executor: Callable[[str], Awaitable[ActiveExecutor | None]]
    # Close a run's browser session (wherever it lives), as opened by this delivery
    # (run_id, attempt) or an earlier one.
    close_session: Callable[[str, int], Awaitable[None]]
    # The largest request, in bytes, `complete` can carry (the bus's max payload; NATS
    # defaults to 1 MB): the agent loop fits its conversation under it.
    max_payload: int = DEFAULT_MAX_PAYLOAD
    # What became of an acting call sent under an idempotency key (the tools service's
    # record of it): how a run settles an action in doubt. None: nothing can tell.
    call_status: Callable[[CallStatusQuery], Awaitable[CallStatus]] | None = None


# Publishes one of the run's lifecycle events under its Nats-Msg-Id. The service masks
# secrets in it and fits a large answer into the blob store; an attempt publishes
# `replay_failed` through it while it runs, before falling back to the full loop.
PublishRunEvent = Callable[[RunEvent, str], Awaitable[None]]


@dataclass(frozen=True)
class RunScope:
    """One attempt at one run: what both paths (replay and the agent loop) work within."""

    spec: TaskSpec
    ports: Ports
    run_id: str
    task_id: str
    attempt: int
    transcript: TranscriptRecorder
    # The run's effect journal (effects.py); None: actions are not journaled (offline
    # tools and tests that build a scope by hand).
    effects: RunEffects | None = None


def named_call(request: CompleteRequest) -> CompleteRequest:
    """The request with a call_id, which makes sending it again safe: the llm service
    answers a repeat from its record of the first instead of calling the model twice."""
    if request.call_id is not None:
        return request
    return msgspec.structs.replace(request, call_id=uuid.uuid4().hex)
