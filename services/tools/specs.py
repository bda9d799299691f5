"""The tool catalogue: each tool's name, description and input schema (usable as-is as
an Anthropic tool definition), and validation of a call's input against it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import msgspec

from contracts import tools as t
from contracts.llm import ToolDefinition
from services.kernel.codec import nesting_depth
from services.kernel.errors import ServiceError, validation_error
from services.kernel.text import cut_text
from services.tools.bounds import MAX_QUOTED_URL_CHARS

Kind = Literal["browser", "local"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: Kind
    description: str
    input_type: type[t.ToolInput]
    # False only for a tool that awaits nothing (no I/O): it needs no deadline.
    can_block: bool = True

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, input_schema=input_schema(self.name)
        )


# Said by the tools that type: the tools service fills the placeholder in (vault.py).
SECRET_NOTE = " A value `{{secret:NAME}}`, written as the task gives it, types that secret."

# Said by every tool that acts on a page (services/tools/browser.py answers dialogs).
DIALOGS_NOTE = (
    " Output `dialogs`: dialogs shown since the last report; a confirm/prompt is dismissed"
    " unless `confirm`."
)

SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        ToolSpec(
            "browser_navigate",
            "browser",
            "Open a URL in this run's browser tab and wait for the page to load. "
            "Returns the final URL (after redirects), the HTTP status and the page title.",
            t.BrowserNavigateInput,
        ),
        ToolSpec(
            "browser_read_page",
            "browser",
            "Return the readable visible text of the current page, then that of the "
            "frames it embeds (long pages are cut).",
            t.BrowserReadPageInput,
        ),
        ToolSpec(
            "browser_extract",
            "browser",
            "Extract data from every element matching a CSS selector. Without `fields`: a "
            "list of strings (each match's visible text, or the value of `attribute`). With "
            "`fields`: a list of objects, one per match, each field given as 'css' (text of "
            "a sub-element), '@attr' (attribute of the match) or 'css@attr'; a field that "
            "matches nothing is null. No match is an empty list, not an error. Elements "
            "not shown are skipped when reading text; href/src/action come back as "
            "absolute URLs.",
            t.BrowserExtractInput,
        ),
        ToolSpec(
            "browser_click",
            "browser",
            "Click an element, given either a CSS `selector` or the visible `text` of a link "
            "or button (exactly one of them). Waits for a navigation it causes; returns "
            "the URL and title afterwards." + DIALOGS_NOTE,
            t.BrowserClickInput,
        ),
        ToolSpec(
            "browser_type",
            "browser",
            "Replace the value of an input or textarea (CSS `selector`) with `text`; "
            "`submit` presses Enter afterwards." + SECRET_NOTE + DIALOGS_NOTE,
            t.BrowserTypeInput,
        ),
        ToolSpec(
            "browser_fill_form",
            "browser",
            "Fill several form fields at once and, unless `submit` is false, submit the "
            "form. Each key of `fields` is a CSS selector, a field's name or its label."
            + SECRET_NOTE
            + DIALOGS_NOTE,
            t.BrowserFillFormInput,
        ),
        ToolSpec(
            "browser_scroll",
            "browser",
            "Scroll the page up or down by `amount` pixels (default: one screen); a page "
            "that does not scroll itself scrolls its main scrollable pane instead. Returns "
            "the new vertical position and `at_end` (nothing more that way).",
            t.BrowserScrollInput,
        ),
        ToolSpec(
            "browser_screenshot",
            "browser",
            "Take a PNG screenshot of the page (`full_page`: the whole page, up to 16,384 pixels"
            " each way); returns its sha256 and where it is stored.",
            t.BrowserScreenshotInput,
        ),
        ToolSpec(
            "browser_candidates",
            "browser",
            "List what the current page offers, compactly, in page order (main frame only). "
            "purpose 'act': its visible controls (links, buttons, fields), each with a CSS "
            "`selector` matching it alone, its `role`, accessible `name`, `tag` and `text`. "
            "purpose 'read': its groups of alike elements (list items, table rows, cards), "
            "each with one `selector` matching every item, their `count`, the first items' "
            "texts (`samples`) and the first item's `parts` (a selector within the item -> "
            "its text), and single short values. At most `limit`; `truncated`: there was "
            "more. Hidden elements are left out. Returns {url, title, candidates, truncated}.",
            t.BrowserCandidatesInput,
        ),
        ToolSpec(
            "shell_exec",
            "local",
            "Run a command line (split like a POSIX shell, run without one: no pipes, "
            "redirections or variables) with a timeout. Only commands the operator allowed "
            "run. Returns the exit code, stdout and stderr (long output is cut).",
            t.ShellExecInput,
        ),
        ToolSpec(
            "file_read",
            "local",
            "Read a UTF-8 text file under the allowed directories (long files are cut).",
            t.FileReadInput,
        ),
        ToolSpec(
            "noop",
            "local",
            "Do nothing and return `echo` unchanged. For checking and measuring the tool "
            "path itself; it touches no browser, file or process.",
            t.NoopInput,
            can_block=False,
        ),
        ToolSpec(
            "file_write",
            "local",
            "Write a UTF-8 text file under the allowed directories, creating parent "
            "directories; returns the path and the number of bytes written.",
            t.FileWriteInput,
        ),
    ]
}


def _simplify(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional field is `X | None` in the Struct; to a model it is just an optional X.
    Turn `anyOf [X, null]` with a null default into X, and drop titles."""
    out = {k: v for k, v in schema.items() if k != "title"}
    props = out.get("properties")
    if isinstance(props, dict):
        simplified = {}
        for name, prop in props.items():
            options = prop.get("anyOf")
            if (
                isinstance(options, list)
                and len(options) == 2
                and {"type": "null"} in options
                and prop.get("default", None) is None
            ):
                (kept,) = [o for o in options if o != {"type": "null"}]
                prop = {**kept, **{k: v for k, v in prop.items() if k not in ("anyOf", "default")}}
            simplified[name] = prop
        out["properties"] = simplified
    return out


@cache
def input_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a tool's input, with the top level inlined (Anthropic wants
    `{"type": "object", ...}` there, not a `$ref`)."""
    raw = msgspec.json.schema(SPECS[name].input_type)
    defs: dict[str, Any] = dict(raw.get("$defs", {}))
    ref = raw.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else raw
    schema = _simplify(top)
    schema.pop("description", None)  # the tool's description says it better
    if defs:
        schema["$defs"] = {k: _simplify(v) for k, v in defs.items()}
    return schema


def definitions(names: list[str] | None = None) -> list[t.ToolDefinition]:
    """Tool definitions in catalogue order; `names` narrows (unknown names are skipped)."""
    wanted = set(names) if names is not None else None
    return [spec.definition() for name, spec in SPECS.items() if wanted is None or name in wanted]


def spec_for(tool: str) -> ToolSpec:
    try:
        return SPECS[tool]
    except KeyError:
        raise ServiceError(
            "not_found", f"no tool {tool!r} (known: {', '.join(SPECS)})", field="tool"
        ) from None


def _invalid(message: str, field: str) -> ServiceError:
    return ServiceError("invalid_request", message, field=f"input.{field}")


# Deeper than any tool's input (the llm service refuses a tool_use nested deeper, too).
MAX_NESTING = 100


def check_nesting(raw: dict[str, Any]) -> None:
    """A call's input nested deeper than any tool's input (or any model's tool_use)
    would exhaust Python's stack wherever it is walked: `invalid_request`."""
    if nesting_depth(raw) > MAX_NESTING:
        raise ServiceError(
            "invalid_request",
            f"the input is nested more than {MAX_NESTING} levels deep",
            field="input",
        )


def validate_input(tool: str, raw: dict[str, Any]) -> t.ToolInput:
    """Decode a call's input into its tool's Struct; a mismatch is `invalid_request`
    naming the field as `input.<name>`."""
    spec = spec_for(tool)
    try:
        value = msgspec.convert(raw, spec.input_type)
    except RecursionError:  # check_nesting runs first; kept should a caller skip it
        raise ServiceError(
            "invalid_request", f"{tool}: the input is nested too deeply", field="input"
        ) from None
    except msgspec.ValidationError as exc:
        err = validation_error(exc)
        # msgspec writes a dict value's path as `fields[...]`: name the dict.
        path = (err.field or "").replace("[...]", "")
        field = f"input.{path}" if path else "input"
        raise ServiceError("invalid_request", f"{tool}: {err.message}", field=field) from None
    _check_rules(value)
    return value


def _check_rules(value: t.ToolInput) -> None:
    """What a JSON Schema cannot say (or a model would not read)."""
    match value:
        case t.BrowserClickInput(selector=selector, text=text):
            if (selector is None) == (text is None):
                raise _invalid("browser_click takes exactly one of `selector` and `text`", "text")
        case t.BrowserNavigateInput(url=url):
            scheme = url.split(":", 1)[0].lower() if ":" in url else ""
            # file:, chrome: and friends would reach past the path policy.
            if scheme not in ("http", "https"):
                # Masked before the cut: half a URL password would pass the later redact.
                quoted = cut_text(url, MAX_QUOTED_URL_CHARS)
                raise _invalid(f"only http(s) URLs can be opened, not {quoted!r}", "url")
        case t.BrowserFillFormInput(fields=fields):
            if not fields:
                raise _invalid("fill_form needs at least one field", "fields")
        case t.BrowserExtractInput(attribute=attribute, fields=fields):
            if attribute is not None and fields is not None:
                raise _invalid("give `attribute` or `fields`, not both", "fields")
        case _:
            pass
