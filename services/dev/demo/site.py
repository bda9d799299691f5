"""A small local website for the demo, the end-to-end tests and the benchmarks.

Its content changes between editions (fresh headlines, new prices), so a replay must
read the page again rather than repeat old answers; its layout can switch from v1 to
v2, which breaks selectors the way a real site redesign does.

Pages:
    /               links to every section
    /news           top stories        v1: h2.headline > a        v2: article > h3.title > a
    /news/<n>       one story
    /shop           products           v1: li.item .name .price    v2: table tr td.name td.price
    /shop/<slug>    one product, with its description
    /signup         a form (name, email, plan) posting to /signup/done
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Literal

from services.dev.demo.pages import PageServer

Layout = Literal["v1", "v2", "v3"]

_SUBJECTS = [
    "City council", "Local bakery", "River cleanup", "Night market", "School robotics team",
    "Harbour ferry", "Library", "Cycling club", "Weather service", "Museum",
    "Football club", "Hospital", "Tram line", "Book fair", "Jazz festival",
]  # fmt: skip
_EVENTS = [
    "opens a new branch", "wins regional award", "breaks attendance record",
    "announces summer schedule", "gets new funding", "celebrates 50 years",
    "launches volunteer drive", "reports record year", "extends opening hours",
    "unveils redesign",
]  # fmt: skip
_PRODUCTS = [
    ("Espresso Grinder", 129.0), ("Pour-over Kettle", 54.5), ("Travel Mug", 19.9),
    ("Milk Frother", 34.0), ("Coffee Scale", 42.75), ("Cold Brew Jar", 27.5),
    ("Paper Filters", 6.4), ("Tamper", 22.0),
]  # fmt: skip


@dataclass(frozen=True)
class Story:
    number: int
    title: str
    body: str


@dataclass(frozen=True)
class Product:
    slug: str
    name: str
    price: float
    description: str


def stories(edition: int, count: int = 8) -> list[Story]:
    """Deterministic per edition; consecutive editions share no top story."""
    out = []
    for i in range(count):
        k = edition * count + i
        subject = _SUBJECTS[(k * 7) % len(_SUBJECTS)]
        event = _EVENTS[(k * 3 + edition) % len(_EVENTS)]
        title = f"{subject} {event} (edition {edition + 1})"
        out.append(Story(number=i + 1, title=title, body=f"{title}. Full story follows."))
    return out


def products(edition: int) -> list[Product]:
    """Prices move between editions, so "the cheapest" changes."""
    out = []
    for i, (name, base) in enumerate(_PRODUCTS):
        factor = 1.0 + (((edition + 1) * (i + 3)) % 7 - 3) * 0.12
        price = round(base * factor, 2)
        slug = name.lower().replace(" ", "-")
        out.append(Product(slug, name, price, f"The {name} — built to last. Ships in 2 days."))
    return out


def _page(title: str, body: str) -> bytes:
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )
    return doc.encode()


class DemoSite(PageServer):
    """Start with `with DemoSite() as site:`; change it with `site.layout = "v2"` and
    `site.edition += 1` (or POST /_admin?layout=v2&edition=3)."""

    def __init__(
        self,
        *,
        layout: Layout = "v1",
        edition: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port, name="demo")
        self.layout: Layout = layout
        self.edition = edition

    # --- rendering ---------------------------------------------------------------------

    def render(self, path: str, form: dict[str, str] | None = None) -> tuple[int, bytes]:
        parts = [p for p in path.split("/") if p]
        if not parts:
            links = "".join(
                f"<li><a href='/{href}'>{label}</a></li>"
                for href, label in (("news", "News"), ("shop", "Shop"), ("signup", "Sign up"))
            )
            return 200, _page("Demo town", f"<h1>Demo town</h1><ul>{links}</ul>")
        if parts == ["news"]:
            return 200, self._news()
        if parts[0] == "news" and len(parts) == 2 and parts[1].isdigit():
            number = int(parts[1])
            for story in stories(self.edition):
                if story.number == number:
                    title, text = html.escape(story.title), html.escape(story.body)
                    return 200, _page(story.title, f"<h1>{title}</h1><p class='body'>{text}</p>")
        if parts == ["shop"]:
            return 200, self._shop()
        if parts[0] == "shop" and len(parts) == 2:
            for product in products(self.edition):
                if product.slug == parts[1]:
                    body = (
                        f"<h1>{html.escape(product.name)}</h1>"
                        f"<p class='price'>${product.price:.2f}</p>"
                        f"<p class='description'>{html.escape(product.description)}</p>"
                    )
                    return 200, _page(product.name, body)
        if parts == ["signup"]:
            return 200, self._signup_form()
        if parts == ["signup", "done"]:
            form = form or {}
            name = html.escape(form.get("name", "friend"))
            plan = html.escape(form.get("plan", "basic"))
            email = html.escape(form.get("email", ""))
            body = (
                "<h1>Welcome</h1>"
                f"<p class='confirmation'>Thank you, {name}! Your {plan} plan is confirmed.</p>"
                f"<p>We wrote to {email}.</p>"
            )
            return 200, _page("Signed up", body)
        return 404, _page("Not found", "<h1>Not found</h1>")

    def _news(self) -> bytes:
        items = stories(self.edition)
        if self.layout == "v1":
            rows = "".join(
                f"<li><h2 class='headline'><a href='/news/{s.number}'>"
                f"{html.escape(s.title)}</a></h2></li>"
                for s in items
            )
            body = f"<h1>Top stories</h1><ul class='stories'>{rows}</ul>"
        elif self.layout == "v3":
            # A live ticker: each headline behind the time it came in, in one text. No
            # element holds the headline alone, so no locator can read it as it was.
            rows = "".join(
                f"<li>{8 + n:02d}:{(7 * n) % 60:02d} {html.escape(s.title)}</li>"
                for n, s in enumerate(items)
            )
            body = f"<h1>Top stories</h1><ol class='ticker'>{rows}</ol>"
        else:
            rows = "".join(
                f"<article class='story'><h3 class='title'><a href='/news/{s.number}'>"
                f"{html.escape(s.title)}</a></h3><p>{html.escape(s.body)}</p></article>"
                for s in items
            )
            body = f"<header><h1>Top stories</h1></header><main>{rows}</main>"
        return _page("Demo town news", body)

    def _shop(self) -> bytes:
        items = products(self.edition)
        if self.layout == "v1":
            rows = "".join(
                f"<li class='item'><a class='name' href='/shop/{p.slug}'>{html.escape(p.name)}</a>"
                f" <span class='price'>${p.price:.2f}</span></li>"
                for p in items
            )
            body = f"<h1>Shop</h1><ul class='products'>{rows}</ul>"
        else:
            rows = "".join(
                f"<tr><td class='name'><a href='/shop/{p.slug}'>{html.escape(p.name)}</a></td>"
                f"<td class='price'>${p.price:.2f}</td></tr>"
                for p in items
            )
            body = (
                "<h1>Shop</h1><table class='products'><thead><tr><th>Product</th><th>Price</th>"
                f"</tr></thead><tbody>{rows}</tbody></table>"
            )
        return _page("Demo town shop", body)

    def _signup_form(self) -> bytes:
        plans = "".join(f"<option value='{p}'>{p}</option>" for p in ("basic", "pro", "team"))
        if self.layout == "v1":
            fields = (
                "<label>Name <input name='name' id='name'></label>"
                "<label>Email <input name='email' id='email' type='email'></label>"
                f"<label>Plan <select name='plan' id='plan'>{plans}</select></label>"
            )
        else:
            fields = "".join(
                f"<div class='row'><label for='f-{name}'>{label}</label>{control}</div>"
                for name, label, control in (
                    ("name", "Name", "<input name='name' id='f-name'>"),
                    ("email", "Email", "<input name='email' id='f-email'>"),
                    ("plan", "Plan", f"<select name='plan' id='f-plan'>{plans}</select>"),
                )
            )
        body = (
            f"<h1>Sign up</h1><form method='post' action='/signup/done'>{fields}"
            "<button type='submit'>Sign up</button></form>"
        )
        return _page("Sign up", body)

    def control(self, path: str, query: dict[str, str]) -> tuple[int, bytes] | None:
        """POST /_admin?layout=v2&edition=3 changes the site (the demo's redesign)."""
        if path != "/_admin":
            return None
        wanted = query.get("layout")
        if wanted == "v1":
            self.layout = "v1"
        elif wanted == "v2":
            self.layout = "v2"
        elif wanted == "v3":
            self.layout = "v3"
        if query.get("edition", "").isdigit():
            self.edition = int(query["edition"])
        return 200, f"layout={self.layout} edition={self.edition}".encode()
