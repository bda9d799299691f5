"""A run's effect journal: every action it took (a click, a submit, a write), recorded
before it runs and settled after, so that no redelivery, restart or fallback of the run
does it twice.

Kept in the key-value bucket `rote_effects` (subjects.BUCKET_EFFECTS), key
`<run_id>.<key>`: `key` is the action's place in the run, stable across redeliveries
for a replay (`x<version>-<step>`, the executor's version and step) and per delivery for a full run
(`b<attempt>-<call>`). The run's terminal event is kept beside them, key
`<run_id>.finished`, so a redelivered run that had ended only publishes it again.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from contracts.base import UtcDatetime
from contracts.errors import ErrorInfo
from contracts.tools import ToolMetadata

# intended: about to run, or running (its outcome not recorded yet);
# done: it ran, `ok`/`output`/`error` are what it answered;
# not_done: it never ran (a check showed it, and closed its key so it never will);
# in_doubt: it started and no check could tell whether it acted.
# The key, beside a run's effects, of its terminal event.
FINISHED_KEY = "finished"

EffectState = Literal["intended", "done", "not_done", "in_doubt"]


class Effect(msgspec.Struct, kw_only=True):
    run_id: str
    key: str
    tool: str
    # As the tools service got it, secrets masked.
    input: dict[str, Any]
    state: EffectState
    # The delivery that intended it, and the key its call went to the tools service
    # under (ExecTool.idempotency_key): what a later delivery asks about.
    attempt: int
    call_key: str
    source: Literal["full_llm", "executor"]
    intended_at: UtcDatetime
    # The call's own deadline, from intended_at: it cannot still be running after.
    timeout_s: float = 60.0
    step: int | None = None
    ok: bool | None = None
    output: Any = None
    # `output` was cut to fit the journal.
    truncated: bool = False
    error: ErrorInfo | None = None
    metadata: ToolMetadata | None = None
    settled_at: UtcDatetime | None = None
    # How it was settled when a check did it (in doubt, or found done or not done).
    note: str | None = None
