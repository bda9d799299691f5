"""The corpus's town hall: forms whose confirmation carries fresh reference numbers, and
a service status page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from services.dev.bench.corpus.site import (
    Layout,
    Site,
    esc,
    not_found,
    page,
    path_parts,
    ref_code,
    rng_for,
)
from services.dev.demo.pages import Rendered

# -- Town hall: forms and a status page


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    kind: Literal["text", "email", "date", "number", "select", "textarea"] = "text"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormSpec:
    slug: str
    title: str
    fields: tuple[FormField, ...]
    confirm: Callable[[dict[str, str], int], str]  # the confirmation line


def _signup_done(form: dict[str, str], edition: int) -> str:
    ref = ref_code("signup", edition, form.get("email", ""))
    return (
        f"Thank you, {form.get('name', 'friend')}! Your {form.get('plan', 'basic')} plan is "
        f"confirmed, membership number M-{ref}."
    )


def _contact_done(form: dict[str, str], edition: int) -> str:
    ticket = ref_code("contact", edition, form.get("message", ""), digits=6)
    days = 1 + edition % 4
    return (
        f"Message received, {form.get('name', 'friend')}: ticket #{ticket}, "
        f"we reply within {days} working days."
    )


def _booking_done(form: dict[str, str], edition: int) -> str:
    ref = ref_code("booking", edition, form.get("date", ""), form.get("guests", ""))
    return (
        f"Booking confirmed for {form.get('guests', '1')} guests on {form.get('date', '?')}, "
        f"{form.get('name', 'friend')}: reference BK-{ref}."
    )


FORMS: dict[str, FormSpec] = {
    "signup": FormSpec(
        "signup",
        "Join the library",
        (
            FormField("name", "Full name"),
            FormField("email", "Email address", "email"),
            FormField("plan", "Plan", "select", ("basic", "pro", "family")),
        ),
        _signup_done,
    ),
    "contact": FormSpec(
        "contact",
        "Write to the town hall",
        (
            FormField("name", "Your name"),
            FormField("email", "Email", "email"),
            FormField("message", "Message", "textarea"),
        ),
        _contact_done,
    ),
    "booking": FormSpec(
        "booking",
        "Book the community room",
        (
            FormField("name", "Name"),
            FormField("date", "Date", "date"),
            FormField("guests", "Guests", "number"),
        ),
        _booking_done,
    ),
}

_SERVICES = ["Water supply", "Waste collection", "Libraries", "Parking permits",
             "Online payments", "Swimming pool", "Bus lanes", "Recycling centre",
             "Marriage registry", "Council tax portal"]  # fmt: skip
_STATES = ["operational", "operational", "operational", "degraded", "under maintenance",
           "closed for the holiday"]  # fmt: skip


def _control(f: FormField, layout: Layout) -> str:
    ident = f"{'f-' if layout == 'v2' else ''}{f.name}"
    hint = f" placeholder='{esc(f.label)}'" if layout == "v3" else ""
    if f.kind == "select":
        options = "".join(f"<option value='{esc(o)}'>{esc(o.title())}</option>" for o in f.options)
        return f"<select name='{f.name}' id='{ident}'>{options}</select>"
    if f.kind == "textarea":
        return f"<textarea name='{f.name}' id='{ident}'{hint}></textarea>"
    return f"<input type='{f.kind}' name='{f.name}' id='{ident}'{hint}>"


def _form_html(spec: FormSpec, layout: Layout) -> str:
    action = f"/{spec.slug}/done"
    if layout == "v1":
        rows = "".join(
            f"<p><label>{esc(f.label)} {_control(f, layout)}</label></p>" for f in spec.fields
        )
        button = "<button type='submit'>Send</button>"
        return f"<form method='post' action='{action}'>{rows}{button}</form>"
    if layout == "v2":
        rows = "".join(
            f"<div class='row'><label for='f-{f.name}'>{esc(f.label)}</label>"
            f"{_control(f, layout)}</div>"
            for f in spec.fields
        )
        return (
            f"<form class='stacked' method='post' action='{action}'>{rows}"
            "<div class='actions'><button type='submit'>Submit</button></div></form>"
        )
    rows = "".join(f"<div class='field'>{_control(f, layout)}</div>" for f in spec.fields)
    return (
        f"<form class='cards' method='post' action='{action}'><fieldset><legend>"
        f"{esc(spec.title)}</legend>{rows}</fieldset>"
        "<input type='submit' value='Continue'></form>"
    )


class TownHall(Site):
    name = "townhall"
    title = "Town Hall"

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Home"), ("/signup", "Library card"), ("/contact", "Contact"),
                ("/booking", "Room booking"), ("/status", "Service status")]  # fmt: skip

    def status_lines(self, edition: int) -> list[tuple[str, str]]:
        rng = rng_for("townhall", "status", edition)
        return [(service, rng.choice(_STATES)) for service in _SERVICES]

    def _status(self, layout: Layout, edition: int) -> bytes:
        lines = self.status_lines(edition)
        head = f"<h1>Service status</h1><p>Checked at {6 + edition % 12:02d}:00 today.</p>"
        if layout == "v1":
            body = "<ul>" + "".join(f"<li>{esc(s)}: {esc(v)}</li>" for s, v in lines) + "</ul>"
        elif layout == "v2":
            rows = "".join(f"<tr><td>{esc(s)}</td><td>{esc(v)}</td></tr>" for s, v in lines)
            head_row = "<thead><tr><th>Service</th><th>State</th></tr></thead>"
            body = f"<table>{head_row}<tbody>{rows}</tbody></table>"
        else:
            body = "".join(f"<div class='svc'><b>{esc(s)}</b> is {esc(v)}</div>" for s, v in lines)
        return page("Service status", head + body, self.nav())

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        parts = path_parts(path)
        if not parts:
            return 200, page(self.title, "<h1>Town Hall</h1><p>Services online.</p>", self.nav())
        if parts == ["status"]:
            return 200, self._status(layout, edition)
        spec = FORMS.get(parts[0])
        if spec is None or len(parts) > 2:
            return not_found()
        if len(parts) == 1:
            body = f"<h1>{esc(spec.title)}</h1>{_form_html(spec, layout)}"
            return 200, page(spec.title, body, self.nav())
        if parts[1] != "done":
            return not_found()
        line = spec.confirm({k: v for k, v in (form or {}).items() if v}, edition)
        body = f"<h1>{esc(spec.title)}</h1><p class='outcome'>{esc(line)}</p>"
        return 200, page("Done", body, self.nav())

    def paths(self, edition: int) -> list[str]:
        return ["/", "/status", *(f"/{slug}" for slug in FORMS)]


TOWNHALL = TownHall()
