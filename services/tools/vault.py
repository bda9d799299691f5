"""Named secrets a run types into a page without anyone seeing them (a login's password).

A task's prompt names a secret by placeholder, `{{secret:shop}}`. The model copies the
placeholder into browser_type or browser_fill_form, and only here, as the text goes
into the page, is it swapped for the value (the environment variable ROTE_SECRET_SHOP
of the tools service). The model, the transcript, the events and so the trace and the
executor hold only the placeholder: a login replays like any other form, where a typed
password, masked in the events, would keep its run from ever compiling.

A secret is typed only on the origins configured for it (ROTE_TOOLS_SECRETS=
shop=https://shop.example): a page elsewhere asking for it (a text on a page telling the
model to type it there) is refused, and so is a field in a frame of another origin
inside an allowed page (an embedded widget, an ad): the browser tools check the field's
own document (SecretField) before typing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.kernel.secrets import register_credential
from services.kernel.settings import web_origin
from services.tools.outcome import ToolFailure

# The whole value, braces and all: a placeholder inside a longer text is typed as it is
# (a password is a field's whole value; part of one is no use to a login).
PLACEHOLDER = re.compile(r"\{\{\s*secret:([A-Za-z][A-Za-z0-9_]{0,63})\s*\}\}")
VALUE_PREFIX = "ROTE_SECRET_"


def placeholder_name(value: object) -> str | None:
    """The secret `value` stands for, when it is exactly a placeholder."""
    if not isinstance(value, str):
        return None
    found = PLACEHOLDER.fullmatch(value.strip())
    return found.group(1).lower() if found else None


@dataclass(frozen=True)
class SecretField:
    """A field about to get the secret `name`: only in a document of `origins`."""

    name: str
    origins: frozenset[str]

    def check(self, origin: str | None, where: str) -> None:
        """Refuse unless `origin` (None: not a web page) is one the secret is for."""
        if origin not in self.origins:
            raise ToolFailure(
                "secret_refused",
                f"the secret {self.name!r} is typed only on {', '.join(sorted(self.origins))};"
                f" {where}",
            )


@dataclass(frozen=True)
class Vault:
    # name -> the origins it may be typed on
    origins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Where the values are: the process environment (tests give their own).
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]], env: Mapping[str, str] | None = None) -> Vault:
        origins: dict[str, set[str]] = {}
        for name, origin in pairs:
            origins.setdefault(name, set()).add(origin)
        frozen = {name: frozenset(found) for name, found in origins.items()}
        return cls(frozen, os.environ if env is None else env)

    def secret_of(self, value: object) -> SecretField | None:
        """The secret `value` is the placeholder of (None: it is no placeholder); a
        placeholder of a secret not configured is refused."""
        name = placeholder_name(value)
        if name is None:
            return None
        allowed = self.origins.get(name)
        if allowed is None:
            raise ToolFailure(
                "secret_unknown",
                f"no secret named {name!r} is configured: the tools service types only"
                " those its ROTE_TOOLS_SECRETS names",
            )
        return SecretField(name, allowed)

    def fill(self, value: str, page_url: str) -> str:
        """`value`, or the secret it is the placeholder of, checked for the page it is
        about to be typed on."""
        secret_field = self.secret_of(value)
        if secret_field is None:
            return value
        origin = web_origin(page_url)
        secret_field.check(origin, f"this page is {origin or page_url!r}")
        name = secret_field.name
        variable = f"{VALUE_PREFIX}{name.upper()}"
        secret = self.env.get(variable)
        if not secret:
            raise ToolFailure(
                "secret_unknown",
                f"the secret {name!r} has no value: {variable} is not set for the tools service",
            )
        register_credential(secret)  # should the page show it back, it is masked
        return secret
