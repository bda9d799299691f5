"""What each tool is, for the compiler and the replay alike: whether it only reads (and
so may be an exploratory probe), navigates or acts, which of its failures are safe to
retry, and what kind of value each input field holds.

The kind of a value decides what its provenance may be:
  structure  selectors, directions, sizes: the model's choice of how, never data
  url        where to go: constant unless it came from an earlier output
  label      visible text to click: constant (a stable UI label) unless it came from an
             earlier structured output (a link text picked from an extract)
  data       text typed or written: constant only when the task prompt supplies it;
             derived from page content, or from nowhere (a date, a sum), it needs judgement
  local      a file path or a command line: like url, but the file system and the shell
             read it as written, so a reference in it is never URL-encoded
  generic    anything else (unknown tools): like url
"""

from __future__ import annotations

from typing import Literal

from services.executor.references import Path

Kind = Literal["structure", "url", "label", "data", "local", "generic"]

# Tools that only read: a call whose result nothing uses can be dropped. browser_candidates
# reads the page's controls and lists (what a heal picks new selectors from): no action.
READ_TOOLS = frozenset({"browser_extract", "browser_read_page", "browser_candidates", "file_read"})

# Tools whose output is content the run decides from, beside the reads: a command's
# output (an ops check's `df -h`) is what its answer is about. Kept even when nothing
# uses them (they may act), but their output is data like a page's.
CONTENT_TOOLS = READ_TOOLS | {"shell_exec"}

# Tools that act (submit, click, type, run a command, write): doing one twice may do
# its effect twice.
ACTION_TOOLS = frozenset(
    {"browser_click", "browser_type", "browser_fill_form", "shell_exec", "file_write"}
)

# Tools that may take the browser to another page: where they go depends on their input.
NAVIGATION_TOOLS = frozenset(
    {"browser_navigate", "browser_click", "browser_type", "browser_fill_form"}
)

_KINDS: dict[str, dict[str, Kind]] = {
    "browser_navigate": {"url": "url"},
    "browser_read_page": {},
    "browser_extract": {},
    "browser_click": {"text": "label"},
    "browser_type": {"text": "data"},
    "browser_fill_form": {"fields": "data"},
    "browser_scroll": {},
    "browser_screenshot": {},
    "browser_candidates": {},
    "shell_exec": {"command": "local"},
    "file_read": {"path": "local"},
    "file_write": {"path": "local", "content": "data"},
}


def value_kind(tool: str, path: Path) -> Kind:
    """The kind of the input value at `path` (its first item is the top-level field)."""
    fields = _KINDS.get(tool)
    if fields is None:
        return "generic"
    if not path or not isinstance(path[0], str):
        return "structure"
    return fields.get(path[0], "structure")


def is_read(tool: str) -> bool:
    return tool in READ_TOOLS


def is_content(tool: str) -> bool:
    """Is this tool's output content the answer or a judgement may depend on? The reads,
    a command, and any tool the compiler does not know (a plugin's lookup answers with
    data; what else would it be for)."""
    return tool in CONTENT_TOOLS or tool not in _KINDS


def navigates(tool: str) -> bool:
    return tool in NAVIGATION_TOOLS


def acts(tool: str) -> bool:
    return tool in ACTION_TOOLS


# Failures after which an action surely did not happen: nothing matched what it was to
# act on. After any other (a timeout, a browser or command error) it may have acted.
DID_NOT_ACT = frozenset({"element_not_found", "invalid_selector"})


def safe_to_retry(tool: str, error_code: str) -> bool:
    """Whether trying the call again cannot do something twice (a second order)."""
    return not acts(tool) or error_code in DID_NOT_ACT
