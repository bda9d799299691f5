"""Model calls in the Anthropic Messages shape.

Assistant turns must go back to the API exactly as they came, thinking blocks and
their signatures included, so every block type the current models return is here.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

import msgspec

from contracts.base import Command, Event, NonEmptyStr, Reply, SubjectToken, UtcDatetime


class TextBlock(msgspec.Struct, kw_only=True, tag="text", tag_field="type"):
    text: str


class ThinkingBlock(msgspec.Struct, kw_only=True, tag="thinking", tag_field="type"):
    thinking: str
    signature: str


class RedactedThinkingBlock(
    msgspec.Struct, kw_only=True, tag="redacted_thinking", tag_field="type"
):
    data: str


class ToolUseBlock(msgspec.Struct, kw_only=True, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(msgspec.Struct, kw_only=True, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False


ContentBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock


class Message(msgspec.Struct, kw_only=True):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class ToolDefinition(msgspec.Struct, kw_only=True):
    """An Anthropic tool definition (what rote.api.tools.list returns, used as-is)."""

    name: str
    description: str
    input_schema: dict[str, Any]


# --- strict twins for requests -----------------------------------------------------------
# The structs above are shared with replies (CompleteReply.content, ToolList.tools) and
# stored data (run transcripts), which stay tolerant like every Reply and Event: an older
# reader must keep reading what a newer writer added. A request is a command, so its
# blocks reject unknown fields instead of dropping them (a "cache_control" on a block
# would otherwise vanish without a word). Subclasses, so callers may still build a
# request from the tolerant structs (or reply content) and isinstance() holds both ways.


class RequestTextBlock(TextBlock, forbid_unknown_fields=True):
    pass


class RequestThinkingBlock(ThinkingBlock, forbid_unknown_fields=True):
    pass


class RequestRedactedThinkingBlock(RedactedThinkingBlock, forbid_unknown_fields=True):
    pass


class RequestToolUseBlock(ToolUseBlock, forbid_unknown_fields=True):
    pass


class RequestToolResultBlock(ToolResultBlock, forbid_unknown_fields=True):
    # Every field again, in the same order: a redefined field alone would move first.
    tool_use_id: str
    # Narrower than the reply's block type, on purpose: a request holds only what may be
    # sent. Type checkers see a field redefined; msgspec decodes by this annotation.
    content: str | list[RequestTextBlock] = ""  # type: ignore[assignment]
    is_error: bool = False


RequestContentBlock = (
    RequestTextBlock
    | RequestThinkingBlock
    | RequestRedactedThinkingBlock
    | RequestToolUseBlock
    | RequestToolResultBlock
)


class RequestMessage(Message, forbid_unknown_fields=True):
    role: Literal["user", "assistant"]
    content: str | list[RequestContentBlock]  # type: ignore[assignment]  # narrowed, as above


class RequestToolDefinition(ToolDefinition, forbid_unknown_fields=True):
    pass


# How hard the model works on a reply (sent as output_config.effort); replay steps use
# "low".
Effort = Literal["low", "medium", "high", "xhigh", "max"]
# Prompt caching: "5m" or "1h" puts a cache breakpoint on the whole prompt (the API's
# top-level cache_control); cache writes cost 1.25x (5m) or 2x (1h), reads 0.1x.
CacheTtl = Literal["5m", "1h"]


class CompleteRequest(Command, kw_only=True):
    """rote.api.llm.complete. `model` is an alias (sonnet, haiku, opus) or a model id."""

    model: NonEmptyStr = "sonnet"
    # Built from Message/ToolDefinition in Python (encoding is by shape); decoded
    # strictly from the wire into the Request* twins (isinstance of the base classes,
    # but == also compares the class: compare decoded requests with to_builtins).
    messages: Annotated[list[RequestMessage], msgspec.Meta(min_length=1)]
    system: str | None = None
    tools: list[RequestToolDefinition] = []
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=128_000)] = 4096
    effort: Effort | None = None
    cache: CacheTtl | None = None
    # run_id becomes a subject token of the usage event (rote.evt.llm.<run_id>.usage).
    run_id: SubjectToken | None = None
    task_id: SubjectToken | None = None
    purpose: str | None = None
    # Names the call within its run: the same request sent again with the same call_id
    # (its reply lost to a reconnect) gets the first one's answer, not a second model
    # call. Without one, every request is a new call.
    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None


class Usage(msgspec.Struct, kw_only=True):
    """Token counts as the API reported them. `input_tokens` excludes cached tokens;
    `cache_write_1h_tokens` is the part of `cache_write_tokens` written with a 1-hour
    TTL (the rest used 5 minutes)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


class CompleteReply(Reply, kw_only=True):
    id: str
    model: str
    content: list[ContentBlock]
    stop_reason: str | None
    usage: Usage
    cost_usd: float
    attempts: int = 1


class UsageEvent(Event, kw_only=True):
    """rote.evt.llm.<run_id>.usage, one per model call."""

    run_id: str
    task_id: str | None = None
    model: str
    usage: Usage
    cost_usd: float
    at: UtcDatetime
    purpose: str | None = None
    attempts: int = 1
    call_id: str | None = None


class TextEvent(Event, kw_only=True):
    """rote.evt.llm.<run_id>.text, one per text block the model wrote."""

    run_id: str
    task_id: str | None = None
    text: str
    turn: int
    at: UtcDatetime
    attempt: int = 1  # the run's delivery attempt: a redelivered run writes its turns again


class PriceBand(msgspec.Struct, kw_only=True):
    """List price per million tokens while the prompt is at most `up_to_prompt_tokens`
    (None: no upper bound)."""

    input_per_mtok: float
    output_per_mtok: float
    up_to_prompt_tokens: int | None = None


class ModelPrice(msgspec.Struct, kw_only=True):
    """A model's prices, and whether it takes `effort` (the 4.5 Haiku and Sonnet answer
    400 to it, so rote leaves it out for them)."""

    id: str
    bands: list[PriceBand]
    cache_write_5m_multiplier: float = 1.25
    cache_write_1h_multiplier: float = 2.0
    cache_read_multiplier: float = 0.1
    retires_on: date | None = None
    accepts_effort: bool = True


# --- the price file (ROTE_PRICES_FILE) ---------------------------------------------------
# Strict twins, like the request blocks above: ModelsReply stays tolerant, but a typo in a
# hand-written price file ("cache_read_multipler") must be an error naming the field, not
# a default price applied without a word.


class PriceFileBand(PriceBand, forbid_unknown_fields=True):
    pass


class PriceFileModel(ModelPrice, forbid_unknown_fields=True):
    """A ModelPrice as the file gives it."""

    id: NonEmptyStr
    bands: list[PriceFileBand]  # type: ignore[assignment]  # narrowed: strict in a file
    # Absent: as the built-in table says for this id (a new price is no new retirement
    # date); null: the model does not retire.
    retires_on: date | msgspec.UnsetType | None = msgspec.UNSET  # type: ignore[assignment]
    # None: as the built-in table says for this id (True for a model it does not know).
    accepts_effort: bool | None = None  # type: ignore[assignment]


class PriceFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """ROTE_PRICES_FILE: aliases merged over the defaults; a model replaces the default
    entry with the same id or adds a new one."""

    aliases: dict[NonEmptyStr, NonEmptyStr] = {}
    models: list[PriceFileModel] = []


class ModelsReply(Reply, kw_only=True):
    aliases: dict[str, str]
    models: list[ModelPrice]
