"""Values that are URLs: references inside a path segment or a query, encoded on replay
as the part needs, and links a read found that resolve to the URL opened.

A value the run put into a URL is often written there encoded ("q=Acme%20Widget"):
plain matching cannot see it, so each part's decoded text is matched instead
(`urlparts`). A relative link ("../s/a") resolved against the page it was on cannot be
written as text around a reference, yet the URL is that link, not a constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import urljoin

from services.compiler.dataflow import urlparts
from services.compiler.dataflow.sources import Context, Pointer, Source, Template
from services.compiler.dataflow.templates import find_exact, find_template
from services.executor import references


def url_template(
    value: str, sources: Sequence[Source], ctx: Context, template: Template | None
) -> Template | None:
    """`find_template` for a URL. A reference inside one path segment or query part is
    encoded on replay as the part needs (today's "AT&T #1" must not end the query),
    unless the run's value went in already encoded (an href: `_reads_as_itself`); and
    where the run wrote a value encoded ("q=Acme%20Widget" or "q=Acme+Widget"), which
    plain matching cannot see, the parts' decoded text is matched instead and the
    reference encoded the same way."""
    found = urlparts.parts(value)
    if template is not None:
        return _encoded_in_place(value, sources, template, found)
    return _decoded(value, sources, ctx, found)


def _pointer_text(pointer: Pointer, sources: Sequence[Source]) -> str:
    source = next(s for s in sources if s.step == pointer.step)
    return references.stringify(references.lookup(source.output, pointer.path))


def _reads_as_itself(text: str, kind: urlparts.PartKind) -> bool:
    """A value holding escapes ("item%201", an href) went into the URL already encoded:
    encoding it on replay would send another address ("item%25201")."""
    decoded = urlparts.decode(text, kind)
    return decoded is not None and decoded[0] == text


def _encoded_in_place(
    value: str, sources: Sequence[Source], template: Template, found: list[urlparts.Part]
) -> Template:
    """The template with each reference that stands inside one URL part (and went in as
    its text reads) encoded as that part is written."""
    rewrite: dict[int, Pointer] = {}
    at = 0
    for i, part in enumerate(template.parts):
        text = part if isinstance(part, str) else _pointer_text(part, sources)
        size = len(text)
        if isinstance(part, Pointer):
            inside = [p for p in found if p.start <= at and at + size <= p.end]
            if inside and _reads_as_itself(text, inside[0].kind):
                raw = value[inside[0].start : inside[0].end]
                encoding = urlparts.encoding_of(raw, inside[0].kind)
                rewrite[i] = replace(part, encoding=encoding)
        at += size
    if not rewrite:
        return template
    parts = tuple(rewrite.get(i, p) for i, p in enumerate(template.parts))
    return replace(template, parts=parts)


def _decoded(
    value: str, sources: Sequence[Source], ctx: Context, found: list[urlparts.Part]
) -> Template | None:
    """A template from the decoded text of the URL's encoded parts: each output string
    found there is a reference encoded as the part is, the rest stays as written."""
    out: list[str | Pointer] = []
    opened: list[tuple[int, tuple[Pointer, ...]]] = []
    cursor = 0
    for part in found:
        raw = value[part.start : part.end]
        decoded = urlparts.decode(raw, part.kind)
        if decoded is None or decoded[0] == raw:
            continue  # written as it reads: plain matching already looked at it
        text, starts = decoded
        local = find_exact(text, sources, ctx) or find_template(text, sources, ctx, "url")
        if local is None:
            continue
        encoding = urlparts.encoding_of(raw, part.kind)
        out.append(value[cursor : part.start])
        at = 0  # in the decoded text
        local_open = dict(local.open)
        for i, piece in enumerate(local.parts):
            if isinstance(piece, str):
                out.append(raw[starts[at] : starts[at + len(piece)]])
                at += len(piece)
                continue
            if i in local_open:
                opened.append((len(out), local_open[i]))
            out.append(replace(piece, encoding=encoding))
            at += len(_pointer_text(piece, sources))
        cursor = part.end
    if not out:
        return None
    out.append(value[cursor:])
    return _merged(out, opened)


def _merged(
    out: Sequence[str | Pointer], opened: Sequence[tuple[int, tuple[Pointer, ...]]]
) -> Template:
    """`out` as a template: empty text dropped, neighbouring text joined, the open parts'
    indexes moved with them."""
    merged: list[str | Pointer] = []
    index: dict[int, int] = {}  # position in `out` -> in `merged`
    for n, piece in enumerate(out):
        if isinstance(piece, str):
            if not piece:
                continue
            if merged and isinstance(merged[-1], str):
                merged[-1] += piece
                continue
        index[n] = len(merged)
        merged.append(piece)
    return Template(tuple(merged), tuple((index[n], ptrs) for n, ptrs in opened))


def _link_like(leaf: str) -> bool:
    return (
        1 < len(leaf) <= 2048
        and not any(ch.isspace() for ch in leaf)
        and ("/" in leaf or leaf.startswith(("?", "#")))
    )


def resolved_link(
    value: str, sources: Sequence[Source], ctx: Context, template: Template | None
) -> Pointer | None:
    """A link a read found that, resolved against a page the run was on, is exactly the
    URL `value` while no reference points at a read: `../s/a` behind a page URL cannot
    be written as text around a reference, but the URL is still that link, so it is
    not a constant (nor the page URL plus leftover text)."""
    if template is not None and any(
        s.reads and s.step == p.step for p in template.pointers for s in sources
    ):
        return None
    bases = {c for c in ctx.constants if "://" in c}
    bases |= {leaf for s in sources if not s.reads for _, leaf in s.leaves if "://" in leaf}
    if not bases:
        return None
    for source in reversed(sources):
        if not source.reads:
            continue
        for path, leaf in source.leaves:
            if (
                _link_like(leaf)
                and leaf not in ctx.constants
                and any(urljoin(base, leaf) == value for base in sorted(bases))
            ):
                return Pointer(source.step, path)
    return None
