"""browser_candidates: what the run's current page offers, compactly, for repairing a
replayed step whose element is gone (services/runner). Purpose "act": its shown
controls, each with a selector that matches it alone, its role and accessible name;
"read": its groups of alike elements and single values (groups.py).

One evaluate of the main frame (frames are left out), bounded: texts cut to
accessible.MAX_TEXT_CHARS, at most `limit` candidates and `max_candidates_bytes`,
`truncated` when there was more. Every selector was checked in the page it was made
on; none is ever cut short (it would select something else)."""

from __future__ import annotations

from typing import Any

import msgspec

from contracts import tools as t
from contracts.tools import Candidates, ToolMetadata
from services.kernel.text import cut_text
from services.tools.accessible import ACCESSIBLE_JS, MAX_TEXT_CHARS
from services.tools.bounds import MAX_TITLE_CHARS, MAX_URL_CHARS, well_formed, well_formed_value
from services.tools.css_paths import CSS_PATHS_JS
from services.tools.groups import READ_JS
from services.tools.limits import BrowserLimits, Budget
from services.tools.outcome import Outcome
from services.tools.pages import current_page, page_title
from services.tools.session import Session

# read: the texts of the first items of a group, and the parts of its first item.
MAX_SAMPLES = 3
MAX_PARTS = 8
# read: the elements looked at, in page order: a bound on the time a giant page takes.
MAX_SCAN = 20_000

# Runs in the page: ACT_JS(args), args = {limit}; returns {candidates, truncated}.
# - A control inside another (a link's icon, a button's label) is part of it, and a
#   clickable wrapper around controls (a card with an onclick) gives way to them.
# - Hidden controls are left out (accessible.py's visible), so a hidden copy of a form
#   or a menu is never offered, nor confused with the shown one: each selector matches
#   its element and nothing else in the document, hidden elements included.
# - A field's value is what was typed (a password, say): never its text.
ACT_JS = """
(args) => {
  const a11y = ACCESSIBLE_JS;
  const css = CSS_PATHS_JS;
  if (!document.body) return {candidates: [], truncated: false};
  const CONTROLS = "a[href], button, input:not([type=hidden i]), select, textarea, summary, "
    + "[onclick], [role=button], [role=link], [role=tab], [role=menuitem], [role=checkbox], "
    + "[role=radio]";
  const WHOLE = "a[href], button, summary, select, [role=button], [role=link], [role=tab], "
    + "[role=menuitem], [role=checkbox], [role=radio]";
  const FIELDS = new Set(["INPUT", "TEXTAREA"]);
  const shownText = (el) => {
    if (el.tagName === "SELECT") return a11y.cut(a11y.squash(el.selectedOptions[0]?.label));
    if (el.tagName === "TEXTAREA") return "";
    if (el.tagName === "INPUT") {
      if (!/^(submit|button|reset)$/.test(el.type)) return "";
      // A button input shows its value, else its default label ("Submit").
      const shown = a11y.squash(el.value) || {submit: "Submit", reset: "Reset"}[el.type];
      return a11y.cut(shown ?? "");
    }
    return a11y.text(el);
  };
  const found = [];
  let truncated = false;
  for (const el of document.body.querySelectorAll(CONTROLS)) {
    if (el.parentElement?.closest(WHOLE) || !a11y.visible(el)) continue;
    if (!el.matches(WHOLE) && !FIELDS.has(el.tagName) && el.querySelector(CONTROLS)) continue;
    if (found.length === args.limit) {
      truncated = true;
      break;
    }
    const selector = css.unique(el);
    if (selector) found.push({selector, ...a11y.describe(el), text: shownText(el)});
  }
  return {candidates: found, truncated};
}
""".replace("ACCESSIBLE_JS", ACCESSIBLE_JS.strip()).replace("CSS_PATHS_JS", CSS_PATHS_JS.strip())


async def candidates(
    session: Session, args: t.BrowserCandidatesInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    script = ACT_JS if args.purpose == "act" else READ_JS
    js_args = {
        "limit": args.limit,
        "samples": MAX_SAMPLES,
        "parts": MAX_PARTS,
        "scan": MAX_SCAN,
        "text": MAX_TEXT_CHARS,
    }
    found = _decoded(await page.evaluate(script, js_args))
    title = await page_title(page)
    found.url = cut_text(well_formed(page.url), MAX_URL_CHARS)
    found.title = cut_text(well_formed(title), MAX_TITLE_CHARS)
    fitted = fit(found, limits.max_candidates_bytes)
    metadata = ToolMetadata(url=page.url, title=title, item_count=len(fitted.candidates))
    return Outcome(msgspec.to_builtins(fitted), metadata)


def _decoded(raw: Any) -> Candidates:
    # A page's text may hold a lone surrogate (an emoji a script cut): JSON cannot.
    return msgspec.convert(well_formed_value(raw), Candidates)


def fit(found: Candidates, max_bytes: int) -> Candidates:
    """`found` with candidates dropped from the end until it encodes in `max_bytes`
    (then `truncated`): whole candidates, never a selector cut in half."""
    size = len(msgspec.json.encode(found))
    if size <= max_bytes:
        return found
    kept = list(found.candidates)
    while kept and size > max_bytes:
        size -= len(msgspec.json.encode(kept.pop())) + 1  # and its comma
    return msgspec.structs.replace(found, candidates=kept, truncated=True)
