"""Tool calls: the catalogue, one execution, session lifecycle, and tool events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from contracts.base import Command, Event, NonEmptyStr, Reply, SubjectToken, UtcDatetime
from contracts.errors import ErrorInfo
from contracts.llm import ToolDefinition

# The error code of a call that needs the run's browser page when the tools process
# holding it is gone: the page is blank now, and a read of it would look like an empty
# result, so the call fails instead until the run navigates again.
SESSION_LOST = "session_lost"
# The one browser tool that starts a page of its own; every other browser tool (named
# browser_*) acts on the page open in the session.
NAVIGATE = "browser_navigate"


def is_browser_tool(tool: str) -> bool:
    return tool.startswith("browser_")


class ListTools(Command, kw_only=True):
    """rote.api.tools.list; `names` narrows the catalogue (e.g. to a task's allowed tools)."""

    names: list[str] | None = None


class ToolList(Reply, kw_only=True):
    tools: list[ToolDefinition]


class ExecTool(Command, kw_only=True):
    """rote.api.tools.exec. A tool absent from `allowed_tools` is refused before it runs,
    except browser_candidates when `allowed_tools` names a browser tool (it only reads
    the run's own page: services/tools/policy.py)."""

    run_id: SubjectToken
    task_id: SubjectToken | None = None
    allowed_tools: list[str]
    tool: NonEmptyStr
    input: dict[str, Any] = {}
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 30.0
    step: int | None = None
    source: Literal["full_llm", "executor", "condition"] = "full_llm"
    # Unique per attempt; part of the events' Nats-Msg-Id, so a retried step publishes
    # fresh events instead of being de-duplicated away. Generated when absent.
    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    # Which delivery of the run made the call: a trace keeps only the live attempt's.
    attempt: Annotated[int, msgspec.Meta(ge=1)] = 1
    # The model's tool_use id (full-LLM calls): ties the call to the transcript.
    tool_use_id: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    # Set on acting calls (a click, a submit, a write): the same key, for the same run,
    # runs at most once on any tools process, across their restarts. A repeat gets the
    # first call's result, or `in_doubt` when that one started and never finished.
    idempotency_key: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_~-]{1,64}$")] | None = None


class Fingerprint(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What gives the values a browser_extract read their meaning on the page, taken in
    the same call: recorded when an executor is compiled, compared on each replay
    (services/executor/drift.py), where a difference makes the replay unverified.

    `field` names below are the extract's `fields` names, or "" for the match itself."""

    lang: str = ""  # the document's lang attribute
    # Short visible texts around what was read, in page order, as shown: captions,
    # notes, headings, "updated" lines, footnotes (never text inside the matches).
    notes: list[str] = []
    # The header labels of the table or grid the matches sit in.
    headers: list[str] = []
    # Per field, the label of its element in each match (first MAX_FINGERPRINT_ITEMS):
    # the column header, the <dt> or paired label, the aria-label; null when none.
    labels: dict[str, list[str | None]] = {}
    # Per field, whether its element in each match is struck through or deleted.
    struck: dict[str, list[bool]] = {}
    # Per field, the tag path of its element in the first match ("table>tbody>tr>td").
    paths: dict[str, str] = {}
    # Per field, the distinct shapes of its values ("$9.9", "9 °a"; drift.value_shape).
    shapes: dict[str, list[str]] = {}


MAX_FINGERPRINT_ITEMS = 50


class Target(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The element an action was done on, as a person would name it: its ARIA role
    ("button", "link", "textbox"...), its accessible name (label, text, aria-label), its
    tag. An executor keeps it, so a healed action is done on the same control or not at
    all (services/executor/healing.py)."""

    role: str = ""
    name: str = ""
    tag: str = ""


class Candidate(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One element, or group of alike elements, a page offers (browser_candidates).
    `selector`: a CSS selector that matches exactly this element (purpose "act") or every
    item of the group (purpose "read"); `count`: how many it matches."""

    selector: str
    role: str = ""
    name: str = ""
    tag: str = ""
    text: str = ""  # its visible text, cut short
    count: int = 1
    # read: the parts of the first item: a CSS selector relative to the item -> its text
    parts: dict[str, str] = {}
    # read: the visible texts of the first few items
    samples: list[str] = []


class Candidates(msgspec.Struct, kw_only=True):
    """browser_candidates' output: what the current page offers to act on or read, in
    page order, bounded (`truncated`: there was more)."""

    url: str = ""
    title: str = ""
    candidates: list[Candidate] = []
    truncated: bool = False


class ToolMetadata(msgspec.Struct, kw_only=True):
    """Facts about a call the compiler turns into replay expectations."""

    url: str | None = None
    http_status: int | None = None
    title: str | None = None
    item_count: int | None = None
    exit_code: int | None = None
    blob: str | None = None  # "sha256:<hex>" of a stored artefact (screenshot, large output)
    fingerprint: Fingerprint | None = None  # browser_extract: what the values meant
    target: Target | None = None  # browser_click / browser_type: the element acted on


class ToolResult(Reply, kw_only=True):
    """The outcome of one call. `ok=false` with `error` is a tool failure the model
    should see (bad selector, timeout); refusals are error replies instead."""

    ok: bool
    output: Any = None
    truncated: bool = False
    duration_ms: int
    metadata: ToolMetadata = msgspec.field(default_factory=ToolMetadata)
    error: ErrorInfo | None = None
    # The tools process that holds this run's browser session: later calls of the run
    # go to it directly (subjects.tools_exec_on), so several processes can share runs.
    served_by: str | None = None


class CallStatusQuery(Command, kw_only=True):
    """rote.api.tools.call_status: what became of the call sent as `key` for `run_id`.
    `fence`: a key no call has used yet is closed, so a request still on its way can
    never run later under it (the caller then knows it did not act)."""

    run_id: SubjectToken
    key: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_~-]{1,64}$")]
    fence: bool = True


CallState = Literal["unknown", "fenced", "running", "finished", "in_doubt"]


class CallStatus(Reply, kw_only=True):
    """unknown: no call used the key (fence=false); fenced: none did, and none will;
    running: a call is running under it, until `until` at the latest; finished: it ran,
    `result` is what it answered; in_doubt: it started and never finished (its tools
    process died mid-call), so whether it acted is unknown."""

    run_id: str
    key: str
    state: CallState
    result: ToolResult | None = None
    started_at: UtcDatetime | None = None
    until: UtcDatetime | None = None


class CloseSession(Command, kw_only=True):
    run_id: SubjectToken
    # The delivery of the run that is done with its session. A later delivery's session
    # is left open: a runner that lost the run to another must not close the other's
    # page under it. None closes the run's session whichever delivery opened it.
    attempt: Annotated[int, msgspec.Meta(ge=1)] | None = None


class SessionClosed(Reply, kw_only=True):
    run_id: str
    closed: bool


class ToolEvent(Event, kw_only=True):
    """rote.evt.tool.<run_id>.<started|finished>."""

    run_id: str
    task_id: str | None = None
    call_id: str | None = None
    event: Literal["started", "finished"]
    step: int | None = None
    attempt: int = 1
    tool_use_id: str | None = None
    tool: str
    input: dict[str, Any]
    # `input` was cut to fit the event (a long text typed or written): it is not what
    # the tool was given, so it must not be replayed as is.
    input_truncated: bool = False
    at: UtcDatetime
    source: Literal["full_llm", "executor", "condition"] = "full_llm"
    ok: bool | None = None
    output: Any = None
    truncated: bool = False
    error: ErrorInfo | None = None
    duration_ms: int | None = None
    metadata: ToolMetadata | None = None


# --- tool inputs -------------------------------------------------------------------------
# One Struct per tool: the JSON Schema of each is the tool's Anthropic `input_schema`, and
# decoding into it validates a call's input. Unknown fields are refused so a misspelt
# option is an error instead of being silently ignored.

Url = Annotated[str, msgspec.Meta(min_length=1, description="absolute http(s) URL")]
Css = Annotated[str, msgspec.Meta(min_length=1, description="CSS selector")]
FormValue = str | int | float | bool


class ToolInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every tool's input."""


class BrowserNavigateInput(ToolInput):
    url: Url


class BrowserReadPageInput(ToolInput):
    pass


class BrowserExtractInput(ToolInput):
    selector: Css
    attribute: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                description="return this attribute of each match instead of its text",
            ),
        ]
        | None
    ) = None
    fields: (
        Annotated[
            dict[str, str],
            msgspec.Meta(
                description=(
                    "one object per match: name -> 'css' (text of the sub-element), "
                    "'@attr' (attribute of the match) or 'css@attr'"
                )
            ),
        ]
        | None
    ) = None
    limit: Annotated[int, msgspec.Meta(gt=0, le=10_000)] | None = None


# A confirm() or prompt() an action raises is dismissed unless the call says otherwise.
Confirm = Annotated[bool, msgspec.Meta(description="accept a confirm/prompt dialog")]


class BrowserClickInput(ToolInput):
    """Exactly one of `selector` and `text`."""

    selector: Css | None = None
    text: (
        Annotated[str, msgspec.Meta(min_length=1, description="visible link or button text")] | None
    ) = None
    confirm: Confirm = False
    # A replay of a click recorded on a control named so: a control whose name only
    # contains the text is another control (services/executor/healing.py).
    exact: Annotated[
        bool,
        msgspec.Meta(description="text: only a link or button named exactly so, case aside"),
    ] = False


class BrowserTypeInput(ToolInput):
    selector: Css
    text: str
    submit: Annotated[bool, msgspec.Meta(description="press Enter afterwards")] = False
    confirm: Confirm = False


class BrowserFillFormInput(ToolInput):
    fields: Annotated[
        dict[str, FormValue],
        msgspec.Meta(
            description=(
                "field -> value; a field is a CSS selector, a field name or its label. "
                "Checkboxes take true/false, selects an option value or label"
            )
        ),
    ]
    submit: Annotated[bool, msgspec.Meta(description="submit the form afterwards")] = True
    confirm: Confirm = False


class BrowserCandidatesInput(ToolInput):
    """What the page offers, for repairing a replayed step whose element is gone
    (services/runner/healing.py): "act", the visible controls (links, buttons, fields),
    each with a selector of its own; "read", the groups of alike elements (list items,
    table rows, cards) with one selector for the group and its items' parts."""

    purpose: Literal["act", "read"]
    limit: Annotated[int, msgspec.Meta(gt=0, le=200)] = 60


class BrowserScrollInput(ToolInput):
    direction: Literal["down", "up"]
    amount: Annotated[int, msgspec.Meta(gt=0, le=100_000, description="pixels")] | None = None


class BrowserScreenshotInput(ToolInput):
    full_page: bool = False


class ShellExecInput(ToolInput):
    command: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="a command line, split like a POSIX shell but run without one",
        ),
    ]
    timeout: Annotated[float, msgspec.Meta(gt=0, le=600, description="seconds")] | None = None


class FileReadInput(ToolInput):
    path: NonEmptyStr


class NoopInput(ToolInput):
    """Anything to echo back (health checks and benchmarks of the tool path itself)."""

    echo: str = ""


class FileWriteInput(ToolInput):
    path: NonEmptyStr
    content: str
