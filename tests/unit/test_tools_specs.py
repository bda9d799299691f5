"""The tool catalogue: Anthropic-shaped definitions, and input validation that names the
offending field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from contracts import tools as t
from contracts.llm import ToolDefinition
from services.kernel.codec import decode, encode
from services.kernel.errors import ServiceError
from services.tools.specs import (
    SPECS,
    check_nesting,
    definitions,
    input_schema,
    validate_input,
)

TOOL_IO_NAMES = [
    "browser_navigate",
    "browser_read_page",
    "browser_extract",
    "browser_click",
    "browser_type",
    "browser_fill_form",
    "browser_scroll",
    "browser_screenshot",
    "browser_candidates",
    "shell_exec",
    "file_read",
    "noop",
    "file_write",
]


def test_the_catalogue_has_every_agreed_tool() -> None:
    assert list(SPECS) == TOOL_IO_NAMES
    assert [d.name for d in definitions()] == TOOL_IO_NAMES
    assert [d.name for d in definitions(["file_read", "browser_click", "nope"])] == [
        "browser_click",
        "file_read",
    ]


@pytest.mark.parametrize("name", TOOL_IO_NAMES)
def test_definitions_are_anthropic_tool_definitions(name: str) -> None:
    definition = next(d for d in definitions() if d.name == name)
    # Round-trips as the contract the llm service sends on.
    assert decode(encode(definition), ToolDefinition) == definition
    schema = definition.input_schema
    assert schema["type"] == "object"
    # Optional fields are plain optional properties, not `X | null` unions.
    assert "$ref" not in schema and "'null'" not in str(schema) and "title" not in schema
    assert schema["additionalProperties"] is False
    assert len(definition.description) > 20
    for prop in schema["properties"].values():
        assert "type" in prop or "enum" in prop


def test_required_and_optional_fields() -> None:
    assert input_schema("browser_navigate")["required"] == ["url"]
    extract = input_schema("browser_extract")
    assert extract["required"] == ["selector"]
    assert extract["properties"]["fields"]["type"] == "object"
    assert extract["properties"]["limit"]["type"] == "integer"
    assert input_schema("browser_click")["required"] == []
    assert input_schema("browser_scroll")["properties"]["direction"]["enum"] == ["down", "up"]
    assert set(input_schema("file_write")["required"]) == {"path", "content"}
    candidates = input_schema("browser_candidates")
    assert candidates["required"] == ["purpose"]
    assert candidates["properties"]["purpose"]["enum"] == ["act", "read"]
    assert candidates["properties"]["limit"] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "maximum": 200,
        "default": 60,
    }


def _invalid(tool: str, raw: dict[str, Any]) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        validate_input(tool, raw)
    return caught.value


@pytest.mark.parametrize(
    ("tool", "raw", "field"),
    [
        ("browser_navigate", {}, "input.url"),
        ("browser_navigate", {"url": 5}, "input.url"),
        ("browser_navigate", {"url": "http://x", "colour": 1}, "input.colour"),
        ("browser_navigate", {"url": "file:///etc/passwd"}, "input.url"),
        ("browser_navigate", {"url": "javascript:alert(1)"}, "input.url"),
        ("browser_navigate", {"url": "example.com"}, "input.url"),
        ("browser_extract", {"selector": ""}, "input.selector"),
        ("browser_extract", {"selector": "li", "limit": 0}, "input.limit"),
        ("browser_extract", {"selector": "li", "fields": {"a": 1}}, "input.fields"),
        ("browser_extract", {"selector": "li", "attribute": "x", "fields": {}}, "input.fields"),
        ("browser_click", {}, "input.text"),
        ("browser_click", {"selector": "a", "text": "b"}, "input.text"),
        ("browser_fill_form", {"fields": {}}, "input.fields"),
        ("browser_fill_form", {"fields": {"q": [1]}}, "input.fields"),
        ("browser_scroll", {"direction": "left"}, "input.direction"),
        ("shell_exec", {"command": ""}, "input.command"),
        ("shell_exec", {"command": "ls", "timeout": -1}, "input.timeout"),
        ("file_write", {"path": "a"}, "input.content"),
    ],
)
def test_bad_input_is_invalid_request_naming_the_field(
    tool: str, raw: dict[str, Any], field: str
) -> None:
    err = _invalid(tool, raw)
    assert (err.code, err.field) == ("invalid_request", field)
    assert err.message


def test_an_input_nested_past_any_tools_is_refused() -> None:
    def nested(depth: int) -> dict[str, Any]:
        value: Any = "x"
        for _ in range(depth - 1):
            value = {"a": value}
        return {"echo": value}

    check_nesting(nested(100))
    with pytest.raises(ServiceError) as caught:
        check_nesting(nested(100_000))  # far past Python's stack, walked without it
    assert (caught.value.code, caught.value.field) == ("invalid_request", "input")


def test_unknown_tool_is_not_found() -> None:
    err = _invalid("browser_teleport", {})
    assert (err.code, err.field) == ("not_found", "tool")
    assert "browser_navigate" in err.message  # says what exists


def test_good_input_decodes_to_the_tool_struct() -> None:
    assert validate_input("browser_navigate", {"url": "https://example.com/a"}) == (
        t.BrowserNavigateInput(url="https://example.com/a")
    )
    click = validate_input("browser_click", {"text": "Next"})
    assert click == t.BrowserClickInput(text="Next")
    form = validate_input("browser_fill_form", {"fields": {"q": "x", "n": 2, "ok": True}})
    assert isinstance(form, t.BrowserFillFormInput) and form.submit is True
    # Explicit nulls for optional fields are accepted (models send them).
    assert validate_input("browser_extract", {"selector": "li", "limit": None}) == (
        t.BrowserExtractInput(selector="li")
    )


def test_every_input_struct_schema_is_what_validation_enforces() -> None:
    # The schema says additionalProperties: false, and validation agrees.
    for name, spec in SPECS.items():
        assert spec.input_type.__struct_config__.forbid_unknown_fields, name
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"__nope__": 1}, spec.input_type)
