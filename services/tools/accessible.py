"""An element as a person names it: whether it is shown, its text, its ARIA role and
its accessible name (approximated). One JS helper, shared by browser_candidates
(candidates.py, groups.py) and by the target of a click or a type
(ToolMetadata.target), so that a healed step is compared with the recorded one by the
very same rules."""

from __future__ import annotations

import msgspec
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts.tools import Target
from services.kernel.logs import get_logger
from services.tools.bounds import well_formed_value

log = get_logger("rote.tools.accessible")

# A text or name longer than this is cut: it names an element, it does not tell its
# content (and a small model reads a page of them).
MAX_TEXT_CHARS = 80

# Runs in the page, as an expression: an object of helpers.
#   visible(el)   shown: not display:none or visibility:hidden (itself or an ancestor),
#                 not under aria-hidden, with a box of more than a pixel, not parked
#                 off the page (left:-9999px copies)
#   text(el)      its visible text, spaces squashed, cut to MAX_TEXT_CHARS
#   ownText(el)   the text of its own text nodes (not its children's), squashed
#   role(el)      its ARIA role: the role attribute, else the implicit one of its tag
#   name(el)      its accessible name: aria-labelledby, aria-label, its <label>s, its
#                 text (not a field's), a button input's value, placeholder, title, alt
#   describe(el)  {role, name, tag}: contracts.tools.Target
# A field's value is never its name: it is what was typed (a password, say).
ACCESSIBLE_JS = """
(() => {
  const TEXT_CHARS = __TEXT_CHARS__;
  const squash = (s) => (s ?? "").replace(/\\s+/g, " ").trim();
  // By code points: a cut through an emoji would leave half of it.
  const cut = (s) => s.length <= TEXT_CHARS ? s
    : [...s.slice(0, 2 * TEXT_CHARS)].slice(0, TEXT_CHARS).join("");
  const contents = (el) => getComputedStyle(el).display === "contents";
  const visible = (el) => {
    if (el.closest('[aria-hidden="true"]')) return false;
    // A display:contents element has no box: it shows what its children show.
    if (contents(el)) return [...el.children].some(visible);
    const css = {visibilityProperty: true, checkVisibilityCSS: true};
    if (el.checkVisibility && !el.checkVisibility(css)) return false;
    const box = el.getBoundingClientRect();
    if (box.width * box.height <= 1) return false;  // no box, or a 1px screen-reader copy
    return box.right + scrollX > 0 && box.bottom + scrollY > 0;
  };
  // innerText of a display:contents element would be all its textContent, hidden
  // parts too: what its shown children show instead.
  const inner = (el) => !contents(el)
    ? (el.innerText ?? el.textContent ?? "")
    : [...el.childNodes].map((n) => n.nodeType === Node.TEXT_NODE ? n.data
        : n.nodeType === Node.ELEMENT_NODE && visible(n) ? ` ${inner(n)} ` : "").join("");
  const text = (el) => cut(squash(inner(el)));
  const ownText = (el) => squash([...el.childNodes]
    .filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.data).join(" "));

  const INPUT_ROLES = new Map(Object.entries({
    search: "searchbox", number: "spinbutton", range: "slider", checkbox: "checkbox",
    radio: "radio", submit: "button", button: "button", reset: "button", image: "button",
    file: "button", color: "button", hidden: "",
  }));
  const TAG_ROLES = new Map(Object.entries({
    button: "button", summary: "button", textarea: "textbox", h1: "heading",
    h2: "heading", h3: "heading", h4: "heading", h5: "heading", h6: "heading",
    ul: "list", ol: "list", li: "listitem", table: "table", tbody: "rowgroup",
    thead: "rowgroup", tr: "row", td: "cell", th: "columnheader", img: "img",
    nav: "navigation", main: "main", article: "article", dialog: "dialog",
    option: "option", progress: "progressbar", dl: "list", dt: "term", dd: "definition",
  }));
  const role = (el) => {
    const explicit = (el.getAttribute("role") ?? "").trim().split(/\\s+/)[0];
    if (explicit) return explicit.toLowerCase();
    const tag = el.tagName.toLowerCase();
    if ((tag === "a" || tag === "area") && el.hasAttribute("href")) return "link";
    if (tag === "input") {
      const type = (el.getAttribute("type") ?? "").trim().toLowerCase();
      return INPUT_ROLES.get(type) ?? "textbox";  // unknown types are text fields
    }
    if (tag === "select") return el.multiple || el.size > 1 ? "listbox" : "combobox";
    return TAG_ROLES.get(tag) ?? "";
  };

  const FIELDS = new Set(["INPUT", "SELECT", "TEXTAREA"]);
  const BUTTON_INPUTS = new Set(["submit", "button", "reset"]);
  const byIds = (el, attr) => squash((el.getAttribute(attr) ?? "").split(/\\s+/)
    .map((id) => id && el.ownerDocument.getElementById(id))
    .filter(Boolean).map((n) => n.textContent).join(" "));
  // A label's words without the controls inside it (a select's options).
  const labelText = (label) => {
    const copy = label.cloneNode(true);
    copy.querySelectorAll("select, textarea, input, script, style").forEach((n) => n.remove());
    return squash(copy.textContent);
  };
  const name = (el) => {
    const tag = el.tagName;
    const type = (el.getAttribute("type") ?? "").trim().toLowerCase();
    const button = tag === "INPUT" && BUTTON_INPUTS.has(type);
    const found = byIds(el, "aria-labelledby") || squash(el.getAttribute("aria-label"))
      || squash([...(el.labels ?? [])].map(labelText).join(" "))
      || (FIELDS.has(tag) ? "" : squash(inner(el)))
      || (button ? squash(el.value) || (type === "button" ? "" : type[0].toUpperCase()
        + type.slice(1)) : "")
      || squash(el.getAttribute("placeholder")) || squash(el.getAttribute("title"))
      || squash(el.getAttribute("alt")) || squash(el.querySelector("img[alt]")?.alt);
    return cut(found);
  };
  const describe = (el) => ({role: role(el), name: name(el), tag: el.tagName.toLowerCase()});
  return {squash, cut, visible, text, ownText, role, name, describe};
})()
""".replace("__TEXT_CHARS__", str(MAX_TEXT_CHARS))

# The target of an action, on its element; null when the page cannot say.
TARGET_JS = """
(el) => {
  try {
    return (ACCESSIBLE_JS).describe(el);
  } catch {
    return null;
  }
}
""".replace("ACCESSIBLE_JS", ACCESSIBLE_JS.strip())


async def target_of(element: Locator, timeout_ms: float) -> Target | None:
    """The element an action is about to be done on, as ToolMetadata.target reports it;
    None when it cannot be told (the page moved on meanwhile): the action goes on.

    Raises PlaywrightTimeout when the element never came: the action would wait for it
    just as long, so that is the action's failure, not the description's (waiting
    twice would double the time a missing element takes to report)."""
    try:
        raw = await element.evaluate(TARGET_JS, timeout=timeout_ms)
    except PlaywrightTimeout:
        raise
    except PlaywrightError as exc:
        log.debug("target_unknown", error=str(exc).splitlines()[0][:300])
        return None
    if not isinstance(raw, dict):
        return None
    try:
        # A page's text may hold a lone surrogate (an emoji a script cut): JSON cannot.
        return msgspec.convert(well_formed_value(raw), Target)
    except msgspec.ValidationError:
        return None
