"""Which typed values are secret placeholders, and what filling one checks."""

from __future__ import annotations

import pytest

from services.kernel.secrets import MASK, redact
from services.tools.outcome import ToolFailure
from services.tools.vault import Vault, placeholder_name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("{{secret:shop}}", "shop"),
        ("{{ secret:Shop_2 }}", "shop_2"),
        (" {{secret:shop}} ", "shop"),
        ("pw{{secret:shop}}", None),  # part of a value is typed as written
        ("{{secret:}}", None),
        ("{{step_1}}", None),
        ("{{secret:shop}}{{secret:shop}}", None),
        (True, None),
    ],
)
def test_placeholder_name(value: object, name: str | None) -> None:
    assert placeholder_name(value) == name


def test_filling_checks_the_origin_then_registers_the_value_for_masking() -> None:
    vault = Vault.of([("shop", "https://shop.test")], env={"ROTE_SECRET_SHOP": "Vault-Pw-991"})
    assert vault.fill("ada", "https://evil.test/") == "ada"  # no placeholder: as it is
    assert vault.fill("{{secret:shop}}", "https://shop.test/login") == "Vault-Pw-991"
    assert redact("echoed Vault-Pw-991") == f"echoed {MASK}"
    with pytest.raises(ToolFailure) as refused:
        vault.fill("{{secret:shop}}", "about:blank")
    assert refused.value.code == "secret_refused"
    assert "this page is 'about:blank'" in refused.value.message


@pytest.mark.parametrize("query", [False, True], ids=["reply", "events"])
def test_a_secret_a_get_form_put_in_the_address_is_masked_there(query: bool) -> None:
    """A login form without method=post submits by GET: the typed password comes back
    percent-encoded in the page's URL, which the reply, the events and the trace carry
    (`pw=` is no credential-named parameter the query masking would know)."""
    vault = Vault.of([("shop", "https://shop.test")], env={"ROTE_SECRET_SHOP": "Tr0ub4dor&3 horse"})
    assert vault.fill("{{secret:shop}}", "https://shop.test/login") == "Tr0ub4dor&3 horse"
    for written in ("Tr0ub4dor%263+horse", "Tr0ub4dor%263%20horse"):
        url = f"https://shop.test/login?user=al&pw={written}"
        assert redact(url, query=query) == f"https://shop.test/login?user=al&pw={MASK}"


def test_a_secret_a_get_form_put_in_the_address_is_masked_as_browsers_encode_it() -> None:
    """A browser encodes a form unlike Python's quote_plus: `~` as %7E, `*` left as it
    is (checked with Chromium), so the address such a password comes back in is none
    of the other forms."""
    secret = "x~Pw*2024 ok"
    vault = Vault.of([("shop", "https://shop.test")], env={"ROTE_SECRET_SHOP": secret})
    assert vault.fill("{{secret:shop}}", "https://shop.test/login") == secret
    url = "https://shop.test/login?user=al&pw=x%7EPw*2024+ok"
    assert redact(url) == f"https://shop.test/login?user=al&pw={MASK}"


def test_a_secret_a_page_script_put_in_the_address_is_masked_there() -> None:
    """A script building the address with encodeURIComponent leaves !'()* as they are
    and writes a space as %20: a form of its own."""
    secret = "(Pw)!'s ok"
    vault = Vault.of([("shop", "https://shop.test")], env={"ROTE_SECRET_SHOP": secret})
    assert vault.fill("{{secret:shop}}", "https://shop.test/login") == secret
    url = "https://shop.test/login?user=al&pw=(Pw)!'s%20ok"
    assert redact(url) == f"https://shop.test/login?user=al&pw={MASK}"


def test_a_field_getting_a_secret_is_checked_against_every_origin_of_it() -> None:
    pairs = [("shop", "https://shop.test"), ("shop", "https://login.shop.test")]
    vault = Vault.of(pairs, env={})
    assert vault.secret_of("ada") is None
    secret = vault.secret_of("{{secret:shop}}")
    assert secret is not None and secret.name == "shop"
    secret.check("https://login.shop.test", "the field")  # either origin will do
    for origin in ("https://ads.test", "null", None):  # "null": a sandboxed frame
        with pytest.raises(ToolFailure) as refused:
            secret.check(origin, "the field is elsewhere")
        assert refused.value.code == "secret_refused"
        assert refused.value.message == (
            "the secret 'shop' is typed only on https://login.shop.test, https://shop.test;"
            " the field is elsewhere"
        )
    with pytest.raises(ToolFailure) as unknown:
        vault.secret_of("{{secret:bank}}")
    assert unknown.value.code == "secret_unknown"
