"""browser_type and browser_fill_form: text typed into fields, form controls set to the
value asked for (or refused), forms submitted; a secret only into a field of its
origin, and the fields that were password fields reported."""

from __future__ import annotations

import re
from contextlib import suppress

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from services.kernel.text import cut_text
from services.tools.accessible import target_of
from services.tools.acting import act, missing_or_stuck, preferring_visible
from services.tools.browser_errors import first_line, is_selector_syntax
from services.tools.limits import BrowserLimits, Budget
from services.tools.navigation import navigation_settled, settle
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import current_page, page_state
from services.tools.session import Session

# A name that is a plain form field name (`q`, `user[email]`), not CSS.
_FIELD_NAME = re.compile(r"^[A-Za-z_][\w\-\[\].:]*$")
_TRUE = {"true", "on", "yes", "1", "checked"}
_FALSE = {"false", "off", "no", "0", "unchecked", ""}


async def type_text(
    session: Session, args: t.BrowserTypeInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    matches = page.locator(args.selector)
    before = session.navigations
    moved = False
    try:
        locator = await preferring_visible(matches)
        # Before typing: a field's value is never part of it, and Enter may leave the page.
        target = await target_of(locator, budget.ms(limits.element_timeout_s))
        await _check_secret_frame(session, args.selector, locator, budget, limits)
        await locator.fill(args.text, timeout=budget.ms(limits.element_timeout_s))
        # Before Enter: a submitted form's field is gone with its page.
        secret = await _is_password_field(locator, budget.ms(limits.element_timeout_s))
        if args.submit:
            timeout = budget.ms(limits.element_timeout_s)
            moved = await act(
                session,
                page,
                locator,
                lambda: locator.press("Enter", timeout=timeout),
                budget,
                limits,
                submits=True,
            )
    except PlaywrightTimeout as exc:
        raise await missing_or_stuck(matches, f"selector {args.selector!r}", exc) from None
    except PlaywrightError as exc:
        if is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", first_line(exc)) from None
        raise ToolFailure("element_not_actionable", first_line(exc)) from None
    page = await current_page(session)
    if args.submit:
        await settle(page, budget, limits)
    state = await page_state(session, page, navigated=moved or session.navigations != before)
    state.metadata.target = target
    return _reporting(state, [args.selector] if secret else [])


# The origin of the document an element is in: a frame's own (srcdoc and about:blank
# frames inherit their parent's), "null" for a sandboxed one.
_DOCUMENT_ORIGIN_JS = "el => el.ownerDocument.defaultView?.origin ?? 'null'"


async def _check_secret_frame(
    session: Session, key: str, field: Locator, budget: Budget, limits: BrowserLimits
) -> None:
    """A selector may reach into a frame (`iframe >> internal:control=enter-frame >>
    input`): a secret goes into the field only when the field's own document, not
    just the page around it, is of an origin the secret is for."""
    secret = session.secret_fields.get(key)
    if secret is None:
        return
    origin = await field.evaluate(_DOCUMENT_ORIGIN_JS, timeout=budget.ms(limits.element_timeout_s))
    secret.check(origin, f"the field {key!r} is in a frame of {origin}")


# A field whose value is a secret: a password input, or one the page marks as taking a
# password or a one-time code (a "show password" toggle turns type=password into text).
_PASSWORD_FIELD_JS = """
el => el.type === 'password'
  || /(^|\\s)(current-password|new-password|one-time-code)(\\s|$)/
       .test(el.getAttribute('autocomplete') || '')
"""


async def _is_password_field(locator: Locator, timeout_ms: float) -> bool:
    try:
        return bool(await locator.evaluate(_PASSWORD_FIELD_JS, timeout=timeout_ms))
    except PlaywrightError:
        return True  # filled, then gone or unreadable: assume the worst


def _reporting(state: Outcome, password_fields: list[str]) -> Outcome:
    """The page state, naming the targets that were password fields: the tools service
    masks what was typed into them in its events."""
    if password_fields:
        state.output["password_fields"] = password_fields
    return state


async def _field(page: Page, key: str) -> Locator | None:
    """The form control a fill_form key names: a field name, a label, or CSS."""
    candidates: list[Locator] = []
    if _FIELD_NAME.match(key):
        quoted = key.replace("\\", "\\\\").replace('"', '\\"')
        candidates.append(page.locator(f'[name="{quoted}"]'))
        candidates.append(page.locator(f'[id="{quoted}"]'))
    candidates.append(page.get_by_label(key, exact=True))
    candidates.append(page.get_by_label(key))
    candidates.append(page.get_by_placeholder(key, exact=True))
    for candidate in candidates:
        if await candidate.count():
            return candidate
    try:
        css = page.locator(key)
        if await css.count():
            return css
    except PlaywrightError:
        pass  # not CSS either
    return None


# A select's options as {value, label}.
_OPTIONS_JS = "el => [...el.options].map(o => ({value: o.value, label: o.label.trim()}))"

# The radio group of `el`: the radios of its form (or document) sharing its name.
_RADIO_GROUP = """
el => !el.name ? [el] : [...el.ownerDocument.querySelectorAll("input[type=radio]")]
  .filter(r => r.name === el.name && r.form === el.form)
"""
# Each member as {value, label}, label being the text of its <label>s or its aria-label.
_RADIO_CHOICES_JS = f"""
el => ({_RADIO_GROUP})(el).map(r => ({{
  value: r.value,
  label: ([...(r.labels ?? [])].map(l => l.innerText).join(" ")
    || r.getAttribute("aria-label") || "").replace(/\\s+/g, " ").trim(),
}}))
"""

# Inputs the browser empties when given a value not in its format (value sanitization),
# with the format they take.
_FORMATS = {
    "date": "YYYY-MM-DD",
    "time": "HH:MM or HH:MM:SS",
    "datetime-local": "YYYY-MM-DDTHH:MM",
    "month": "YYYY-MM",
    "week": "YYYY-Www",
}
_MAX_LISTED = 30  # choices quoted in an error


def _choices(options: list[dict[str, str]]) -> str:
    shown = ", ".join(
        repr(o["value"]) if o["label"] in ("", o["value"]) else f"{o['value']!r} ({o['label']!r})"
        for o in options[:_MAX_LISTED]
    )
    more = len(options) - _MAX_LISTED
    return shown + (f", and {more} more" if more > 0 else "") if options else "none"


def _matching(options: list[dict[str, str]], text: str) -> int | None:
    """The option whose value is `text`, else the one whose label is (case and spacing
    aside): a model often quotes what the page shows rather than the value behind it."""
    for i, option in enumerate(options):
        if option["value"] == text:
            return i
    wanted = " ".join(text.split()).casefold()
    for i, option in enumerate(options):
        if " ".join(option["label"].split()).casefold() == wanted:
            return i
    return None


async def _choose(first: Locator, choices_js: str, text: str, key: str, noun: str) -> int:
    """The index of the choice (a select's option, a radio group's member) `text` names,
    or element_not_found listing what there is to choose from."""
    choices = await first.evaluate(choices_js)
    index = _matching(choices, text)
    if index is None:
        raise ToolFailure(
            "element_not_found",
            f"{key!r} has no {noun} {text!r}; its {noun}s are {_choices(choices)}",
        )
    return index


def _checkbox_state(key: str, value: t.FormValue) -> bool:
    """Checked or not, from true/false or a word meaning one of them. Anything else is
    refused: "ham" for a box is not a reason to clear it."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ToolFailure(
        "invalid_value",
        f"{key!r} is a checkbox: give true or false, not {cut_text(str(value), 100)!r}"
        " (to tick one box of a group, name that box by its label or id)",
    )


async def _set_value(
    key: str, locator: Locator, first: Locator, value: t.FormValue, timeout_ms: float
) -> bool:
    """Set the control's value (`first`, the match acted on, among all of `locator`);
    whether it is a password field. Raises ToolFailure for a value the control cannot
    take, rather than setting something else."""
    kind = await first.evaluate(
        "el => [el.tagName.toLowerCase(), (el.getAttribute('type') || '').toLowerCase(),"
        f" ({_PASSWORD_FIELD_JS})(el)]"
    )
    tag, input_type, secret = kind
    text = value if isinstance(value, str) else ("true" if value is True else str(value))
    if tag == "select":
        # Checked first: select_option would wait out its whole timeout for an option
        # that will never appear.
        index = await _choose(first, _OPTIONS_JS, text, key, "option")
        await first.select_option(index=index, timeout=timeout_ms)
    elif input_type == "checkbox":
        await first.set_checked(_checkbox_state(key, value), timeout=timeout_ms)
    elif input_type == "radio":
        if value is True and await locator.count() == 1:
            # The key named one member (by its label or id): choose it.
            await first.check(timeout=timeout_ms)
            return bool(secret)
        if isinstance(value, bool):
            # A group cannot be unchecked, and `true` does not say which member.
            raise ToolFailure(
                "invalid_value", f"{key!r} is a radio group: give the value or label to choose"
            )
        # Never a fallback to the first member: that would choose something not asked for.
        index = await _choose(first, _RADIO_CHOICES_JS, text, key, "choice")
        handle = await first.evaluate_handle(f"(el, i) => ({_RADIO_GROUP})(el)[i]", index)
        try:
            member = handle.as_element()
            assert member is not None
            await member.check(timeout=timeout_ms)
        finally:
            await handle.dispose()
    else:
        await first.fill(text, timeout=timeout_ms)
        # The browser drops a value not in the input's format without an error.
        if input_type in _FORMATS and text and not await first.input_value(timeout=timeout_ms):
            raise ToolFailure(
                "invalid_value",
                f"{key!r} did not take {text!r}: {input_type} inputs take {_FORMATS[input_type]}",
            )
    return bool(secret)


# The submit button of the field's form, "form" when it has none, null outside a form.
_SUBMIT_JS = """
el => {
  const form = el.form ?? el.closest('form');
  if (!form) return null;
  return form.querySelector(
    'button[type=submit], input[type=submit], button:not([type]), input[type=image]'
  ) ?? 'form';
}
"""


async def _submit(session: Session, last: Locator, budget: Budget, limits: BrowserLimits) -> None:
    timeout = budget.ms(limits.element_timeout_s)
    handle = await last.evaluate_handle(_SUBMIT_JS)
    try:
        button = handle.as_element()
        if button is not None:
            # A real click, so the page's own handlers run and Playwright waits for the
            # navigation it starts.
            await button.click(timeout=timeout)
            return
        if await handle.json_value() == "form":
            requested = session.frames.requested
            await last.evaluate("el => (el.form ?? el.closest('form')).requestSubmit()")
            # Script-initiated: Playwright waits for no navigation, so watch for it.
            await navigation_settled(session, requested, budget, limits, limits.submit_wait_s)
            return
        await last.press("Enter", timeout=timeout)  # not in a form: as a person would
    finally:
        await handle.dispose()


async def fill_form(
    session: Session, args: t.BrowserFillFormInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    before = session.navigations
    last: Locator | None = None
    secret: list[str] = []
    # The fields getting a secret checked before anything is typed, so that a refused
    # form is left as it was; one that appears only as the form is filled is checked
    # when its turn comes.
    for key in session.secret_fields:
        with suppress(PlaywrightError):
            if (locator := await _field(page, key)) is not None:
                first = await preferring_visible(locator)
                await _check_secret_frame(session, key, first, budget, limits)
    for key, value in args.fields.items():
        locator = await _field(page, key)
        if locator is None:
            raise ToolFailure(
                "element_not_found", f"no form field is named, labelled or selected by {key!r}"
            )
        try:
            # As click and type do: a hidden copy of the form (a template, a mobile
            # layout) ahead of the one a person sees must not be the one filled.
            first = await preferring_visible(locator)
            await _check_secret_frame(session, key, first, budget, limits)
            if await _set_value(key, locator, first, value, budget.ms(limits.element_timeout_s)):
                secret.append(key)
        except PlaywrightError as exc:
            raise ToolFailure(
                "element_not_actionable", f"cannot set {key!r}: {first_line(exc)}"
            ) from None
        last = first
    moved = False
    if args.submit and last is not None:
        submitted = last
        try:
            moved = await act(
                session,
                page,
                submitted,
                lambda: _submit(session, submitted, budget, limits),
                budget,
                limits,
                submits=True,
            )
        except PlaywrightError as exc:
            raise ToolFailure(
                "element_not_actionable", f"cannot submit: {first_line(exc)}"
            ) from None
        await settle(await current_page(session), budget, limits)
    page = await current_page(session)
    state = await page_state(session, page, navigated=moved or session.navigations != before)
    return _reporting(state, secret)
