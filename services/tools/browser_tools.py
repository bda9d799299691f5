"""The browser tools by name, each acting on a run's Session. Each returns an Outcome or
raises a ToolFailure the model sees (a selector that matched nothing, a navigation
error). They live by what they do: navigation.py, reading.py, acting.py (click),
forms.py (type, fill_form), screen.py (scroll, screenshot), candidates.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from services.tools.acting import click
from services.tools.candidates import candidates
from services.tools.forms import fill_form, type_text
from services.tools.limits import BrowserLimits, Budget
from services.tools.navigation import navigate
from services.tools.outcome import Outcome
from services.tools.reading import extract, read_page
from services.tools.screen import screenshot, scroll
from services.tools.session import Session

# A tool: the run's session, its validated input, the call's time and the limits.
BrowserTool = Callable[[Session, Any, Budget, BrowserLimits], Awaitable[Outcome]]

BROWSER_TOOLS: dict[str, BrowserTool] = {
    "browser_navigate": navigate,
    "browser_read_page": read_page,
    "browser_extract": extract,
    "browser_click": click,
    "browser_type": type_text,
    "browser_fill_form": fill_form,
    "browser_scroll": scroll,
    "browser_screenshot": screenshot,
    "browser_candidates": candidates,
}
