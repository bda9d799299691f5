"""Every NATS subject, stream, consumer and bucket name rote uses.

Shapes:
    rote.api.<service>.<verb>                       micro endpoints (request/reply)
    rote.intake.tasks.<verb>                        durable fire-and-forget task commands
    rote.evt.run.<task_id>.<run_id>.<event>         run lifecycle
    rote.evt.task.<task_id>.<event>                 task aggregate events
    rote.evt.task.rejected                          intake commands that were refused
    rote.evt.executor.<task_id>.<event>             executor aggregate events
    rote.evt.tool.<run_id>.<started|finished>       tool calls
    rote.evt.llm.<run_id>.<text|usage>              model output and usage
    rote.evt.trace.<task_id>.<run_id>.captured      captured traces
    rote.evt.bus.reconnected                        a process's NATS connection came back
    rote.work.runs                                  the run work queue
"""

from __future__ import annotations

from typing import Final, Literal

PREFIX: Final = "rote"

# --- micro endpoints -------------------------------------------------------------------


def api(service: str, verb: str) -> str:
    return f"{PREFIX}.api.{service}.{verb}"


SYSTEM_INFO: Final = api("system", "info")

TASKS_CREATE: Final = api("tasks", "create")
TASKS_UPDATE: Final = api("tasks", "update")
TASKS_PAUSE: Final = api("tasks", "pause")
TASKS_RESUME: Final = api("tasks", "resume")
TASKS_DELETE: Final = api("tasks", "delete")
TASKS_RUN: Final = api("tasks", "run")
TASKS_GET: Final = api("tasks", "get")
TASKS_LIST: Final = api("tasks", "list")

RUNS_START: Final = api("runs", "start")
RUNS_GET: Final = api("runs", "get")
RUNS_LIST: Final = api("runs", "list")
RUNS_TRANSCRIPT: Final = api("runs", "transcript")

EXECUTORS_ACTIVE: Final = api("executors", "active")
EXECUTORS_GET: Final = api("executors", "get")
EXECUTORS_HISTORY: Final = api("executors", "history")
EXECUTORS_LIST: Final = api("executors", "list")
EXECUTORS_INVALIDATE: Final = api("executors", "invalidate")
EXECUTORS_PIN: Final = api("executors", "pin")
EXECUTORS_STATS: Final = api("executors", "stats")

TOOLS_LIST: Final = api("tools", "list")
TOOLS_EXEC: Final = api("tools", "exec")
TOOLS_CLOSE_SESSION: Final = api("tools", "close_session")
# What became of an acting call sent under an idempotency key (and, fenced, that it
# never runs later if it has not run yet): how a run settles an action in doubt.
TOOLS_CALL_STATUS: Final = api("tools", "call_status")


def tools_exec_on(instance: str) -> str:
    """One tools process's own exec subject: a run's later calls go where its browser
    session lives."""
    return f"{TOOLS_EXEC}.{instance}"


def tools_close_session_on(instance: str) -> str:
    return f"{TOOLS_CLOSE_SESSION}.{instance}"


LLM_COMPLETE: Final = api("llm", "complete")
LLM_MODELS: Final = api("llm", "models")

TRACES_GET: Final = api("traces", "get")

# --- durable task intake ---------------------------------------------------------------

TaskVerb = Literal["create", "update", "pause", "resume", "delete", "run"]
INTAKE_TASKS_ALL: Final = f"{PREFIX}.intake.tasks.>"


def intake_task(verb: str) -> str:
    return f"{PREFIX}.intake.tasks.{verb}"


# --- events ----------------------------------------------------------------------------

RunEventName = Literal["requested", "started", "replay_failed", "completed", "failed"]
RUN_EVENTS_ALL: Final = f"{PREFIX}.evt.run.>"


def run_event(task_id: str, run_id: str, event: RunEventName) -> str:
    return f"{PREFIX}.evt.run.{task_id}.{run_id}.{event}"


def run_events_of(task_id: str = "*", run_id: str = "*", event: str = "*") -> str:
    """A filter over run events, e.g. every completion: run_events_of(event="completed")."""
    return f"{PREFIX}.evt.run.{task_id}.{run_id}.{event}"


TASK_EVENTS_ALL: Final = f"{PREFIX}.evt.task.>"
TASK_REJECTED: Final = f"{PREFIX}.evt.task.rejected"


def task_event(task_id: str, event: str) -> str:
    return f"{PREFIX}.evt.task.{task_id}.{event}"


EXECUTOR_EVENTS_ALL: Final = f"{PREFIX}.evt.executor.>"


def executor_event(task_id: str, event: str) -> str:
    return f"{PREFIX}.evt.executor.{task_id}.{event}"


TOOL_EVENTS_ALL: Final = f"{PREFIX}.evt.tool.>"


def tool_event(run_id: str, event: Literal["started", "finished"]) -> str:
    return f"{PREFIX}.evt.tool.{run_id}.{event}"


LLM_EVENTS_ALL: Final = f"{PREFIX}.evt.llm.>"


def llm_event(run_id: str, event: Literal["text", "usage"]) -> str:
    return f"{PREFIX}.evt.llm.{run_id}.{event}"


TRACE_EVENTS_ALL: Final = f"{PREFIX}.evt.trace.>"


# Core NATS only (no stream): every rote process says so when its connection came back,
# naming what it serves, so that a request to it that died with its old server is sent
# again (services/kernel/bus.py).
BUS_RECONNECTED: Final = f"{PREFIX}.evt.bus.reconnected"


def trace_captured(task_id: str, run_id: str) -> str:
    return f"{PREFIX}.evt.trace.{task_id}.{run_id}.captured"


# --- work queue ------------------------------------------------------------------------

WORK_RUNS: Final = f"{PREFIX}.work.runs"

# --- JetStream streams, consumers and buckets -------------------------------------------

STREAM_INTAKE: Final = "ROTE_INTAKE"
STREAM_WORK: Final = "ROTE_WORK"
STREAM_RUNS: Final = "ROTE_RUNS"
STREAM_TASKS: Final = "ROTE_TASKS"
STREAM_EXECUTORS: Final = "ROTE_EXECUTORS"
STREAM_ACTIVITY: Final = "ROTE_ACTIVITY"
STREAM_TRACES: Final = "ROTE_TRACES"

STREAM_SUBJECTS: Final[dict[str, list[str]]] = {
    STREAM_INTAKE: [INTAKE_TASKS_ALL],
    STREAM_WORK: [WORK_RUNS],
    STREAM_RUNS: [RUN_EVENTS_ALL],
    STREAM_TASKS: [TASK_EVENTS_ALL],
    STREAM_EXECUTORS: [EXECUTOR_EVENTS_ALL],
    STREAM_ACTIVITY: [TOOL_EVENTS_ALL, LLM_EVENTS_ALL],
    STREAM_TRACES: [TRACE_EVENTS_ALL],
}

# Durable consumers shared by every process of a service (queue semantics).
CONSUMER_RUNNER: Final = "rote-runner"
CONSUMER_SCHEDULER_INTAKE: Final = "rote-scheduler-intake"
CONSUMER_SCHEDULER_RUNS: Final = "rote-scheduler-runs"
CONSUMER_COMPILER_TRACES: Final = "rote-compiler-traces"
CONSUMER_COMPILER_RUNS: Final = "rote-compiler-runs"
CONSUMER_TRACER: Final = "rote-tracer"

# Object store for large blobs (screenshots, long tool outputs), keyed by sha256.
BUCKET_BLOBS: Final = "rote_blobs"
# Key-value bucket holding how far each event store's notification log was published.
BUCKET_RELAY: Final = "rote_relay"
# Key-value bucket with the transcript of every run, by run_id.
BUCKET_TRANSCRIPTS: Final = "rote_transcripts"
# Key-value bucket of leases (one holder per role, e.g. "scheduler"); keys expire.
BUCKET_LEASES: Final = "rote_leases"
# Key-value bucket: each run's effect journal (contracts/effects.py), key
# <run_id>.<effect key>, and its terminal event, key <run_id>.finished.
BUCKET_EFFECTS: Final = "rote_effects"
# Key-value bucket: the tools service's record of each acting call it ran under an
# idempotency key, key <run_id>.<idempotency key>; any tools process reads it.
BUCKET_TOOL_CALLS: Final = "rote_tool_calls"

# Headers.
HEADER_MSG_ID: Final = "Nats-Msg-Id"
HEADER_NOTIFICATION_ID: Final = "Rote-Notification-Id"
