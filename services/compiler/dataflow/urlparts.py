"""The parts of a URL a value can stand in, and their percent-decoding with positions.

A value the run put into a URL is written there encoded ("Acme%20Widget" or
"Acme+Widget" in a query): the data flow matches earlier outputs against the decoded
text of each part, and a reference placed in a part is encoded on replay as that part
encodes (references `|url` / `|form`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from services.executor.references import Encoding

_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#]*", re.IGNORECASE)
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")

PartKind = Literal["path", "query"]


@dataclass(frozen=True)
class Part:
    """One path segment, query name or query value: value[start:end]."""

    start: int
    end: int
    kind: PartKind


def looks_like_url(value: str) -> bool:
    """An absolute URL, or a path from the site's root ("/search?q=...")."""
    return _ORIGIN.match(value) is not None or (value.startswith("/") and "//" not in value[:2])


def parts(url: str) -> list[Part]:
    """The path segments and the query's names and values of `url`, in order (never
    the scheme, host or fragment)."""
    origin = _ORIGIN.match(url)
    path_start = origin.end() if origin else 0
    fragment = url.find("#", path_start)
    end = len(url) if fragment == -1 else fragment
    query = url.find("?", path_start, end)
    path_end = end if query == -1 else query
    found: list[Part] = []
    cursor = path_start
    for segment in url[path_start:path_end].split("/"):
        if segment:
            found.append(Part(cursor, cursor + len(segment), "path"))
        cursor += len(segment) + 1
    if query != -1:
        cursor = query + 1
        for piece in url[query + 1 : end].split("&"):
            equals = piece.find("=")
            spans = [(0, len(piece))] if equals == -1 else [(0, equals), (equals + 1, len(piece))]
            for a, b in spans:
                if b > a:
                    found.append(Part(cursor + a, cursor + b, "query"))
            cursor += len(piece) + 1
    return found


def decode(raw: str, kind: PartKind) -> tuple[str, list[int]] | None:
    """The decoded text of a part, and where each of its characters starts in `raw`
    (one more entry: len(raw)), or None when it decodes to no text (bad UTF-8). A "+"
    is a space only in a query."""
    text: list[str] = []
    starts: list[int] = []
    i = 0
    while i < len(raw):
        if _ESCAPE.match(raw, i):
            run = bytearray()
            j = i
            while _ESCAPE.match(raw, j):
                run.append(int(raw[j + 1 : j + 3], 16))
                j += 3
            try:
                chunk = run.decode("utf-8")
            except UnicodeDecodeError:
                return None
            at = i
            for ch in chunk:
                text.append(ch)
                starts.append(at)
                at += 3 * len(ch.encode("utf-8"))
            i = j
            continue
        text.append(" " if raw[i] == "+" and kind == "query" else raw[i])
        starts.append(i)
        i += 1
    starts.append(len(raw))
    return "".join(text), starts


def encoding_of(raw: str, kind: PartKind) -> Encoding:
    """How the run encoded this part: a query that wrote spaces as "+" is form-style;
    everything else (spaces left raw, which a browser sends as %20) is percent-style."""
    return "form" if kind == "query" and "+" in raw else "url"
