"""Helpers for the data-flow golden tables: a template written as one readable string,
and sources built in one line."""

from __future__ import annotations

from typing import Any

from services.compiler.dataflow.sources import Pointer, Source, Template
from services.executor.references import format_path


def pointer(p: Pointer) -> str:
    """A pointer as `step` and its path, with its URL encoding if any: "1[0].name|url"."""
    return f"{p.step}{format_path(p.path)}" + (f"|{p.encoding}" if p.encoding else "")


def show(template: Template | None) -> str | None:
    """The template's text with each reference in braces ("Top: {1[0]}"); an open part
    lists every item holding its text, then how the part is encoded if it is
    ("{1[0].state / 1[1].state|url}")."""
    if template is None:
        return None
    opened = dict(template.open)
    out: list[str] = []
    for i, part in enumerate(template.parts):
        if isinstance(part, str):
            out.append(part)
        elif i in opened:
            encoding = f"|{part.encoding}" if part.encoding else ""
            out.append("{" + " / ".join(pointer(p) for p in opened[i]) + encoding + "}")
        else:
            out.append("{" + pointer(part) + "}")
    return "".join(out)


def read(step: int, output: Any, tool: str = "browser_read_page") -> Source:
    """A source whose output is content (a page, an extract, a command's output)."""
    return Source.of(step, tool, output, reads=True)


def extract(step: int, output: Any) -> Source:
    return Source.of(step, "browser_extract", output, reads=True)


def navigated(step: int, url: str, title: str = "") -> Source:
    """A navigation's report: not content."""
    return Source.of(step, "browser_navigate", {"url": url, "title": title}, reads=False)
