"""CSS selectors that pick out an element of the page by what is likely to last: an id,
a test id, a name or a label, a class, and only then its place in the document. Used
by browser_candidates (candidates.py, groups.py), which verifies every selector it
offers in the page it was made on."""

from __future__ import annotations

# Runs in the page, as an expression: an object of helpers.
#   generated(name)   an id or class a framework made up (React's ":r1:", "ember123",
#                     "css-1x2y3z", hashes): it changes with the next build
#   stableId(el)      "#id" when its id is not generated and no other element has it
#   classes(el)       its classes that are neither generated nor a passing state
#   sig(el)           tag and stable classes ("li.story"): what alike elements share
#   step(el)          tag, with :nth-of-type(k) when same-tag siblings exist
#   only(sel, el)     sel matches el and nothing else in the document
#   unique(el)        a selector that matches el alone (only()), or null: #id, then tag
#                     with one or two stable attributes, then tag with classes, then
#                     one of those within the nearest ancestors having an id, then the
#                     shortest path of steps that does, below the nearest such ancestor
#                     or <body>
# Ids and classes go through CSS.escape; attribute values are quoted strings.
CSS_PATHS_JS = """
(() => {
  const esc = CSS.escape;
  const all = (sel, root = document) => {
    try {
      return root.querySelectorAll(sel);
    } catch {
      return [];  // a selector the page's engine refuses: never offered
    }
  };
  const FRAMEWORK = /^(ember|ext-gen|mui-|radix-|react-|headlessui-|yui_|sc-|css-|jsx-|svelte-)/i;
  const generated = (name) => /\\d{3,}|:|^_|__/.test(name) || FRAMEWORK.test(name)
    || name.split(/[-_]/).some((p) => p.length >= 6 && /\\d/.test(p) && /[a-z]/i.test(p));
  // Classes a page toggles as it is used: an element keeps none of them for long.
  const STATE = new RegExp("^(is-|has-)|^(active|selected|current|focus|focused|hover|open"
    + "|opened|closed|disabled|visible|hidden|show|shown|collapsed|expanded|checked)$");
  const ids = new Map();
  const stableId = (el) => {
    if (!ids.has(el)) {
      const id = el.getAttribute("id");
      const sel = id && !generated(id) ? `#${esc(id)}` : null;
      ids.set(el, sel && all(sel).length === 1 ? sel : null);
    }
    return ids.get(el);
  };
  const classes = (el) => [...el.classList].filter((c) => !generated(c) && !STATE.test(c));
  const tagOf = (el) => esc(el.tagName.toLowerCase());
  const sig = (el) => tagOf(el) + classes(el).sort().map((c) => `.${esc(c)}`).join("");
  const step = (el) => {
    const same = [...(el.parentElement?.children ?? [el])].filter((c) => c.tagName === el.tagName);
    return same.length > 1 ? `${tagOf(el)}:nth-of-type(${same.indexOf(el) + 1})` : tagOf(el);
  };
  const only = (sel, el) => {
    const found = all(sel);
    return found.length === 1 && found[0] === el;
  };
  const ATTRS = ["data-testid", "data-test", "data-qa", "data-cy", "name", "aria-label",
    "placeholder", "title", "alt", "type", "value", "href", "for", "role"];
  const CHOSEN = /^(submit|button|reset|radio|checkbox)$/i;  // inputs whose value is no data
  const attr = (el, name) => {
    const value = el.getAttribute(name);
    if (value === null || value.length > 80 || /[\\x00-\\x1f\\x7f]/.test(value)) return null;
    if (name === "value" && !(el.tagName === "INPUT" && CHOSEN.test(el.type))) return null;
    if (name === "href" && /^\\s*javascript:/i.test(value)) return null;
    return `[${name}="${value.replace(/["\\\\]/g, "\\\\$&")}"]`;
  };
  // Steps up from the element to its nearest ancestor with an id (else <body>): the
  // fewest last steps that pick it out below that ancestor, else all of them.
  const path = (el) => {
    const steps = [];
    let anchor = null;
    for (let up = el; up && !anchor; up = up.parentElement) {
      anchor = up !== el && stableId(up);
      if (!anchor && (up === document.body || up === document.documentElement)) {
        anchor = tagOf(up);
      } else if (!anchor) {
        steps.unshift(step(up));
      }
    }
    if (!anchor) return null;  // not in the document (a shadow root's)
    for (let n = 1; n < steps.length; n++) {
      const sel = `${anchor} ${steps.slice(-n).join(" > ")}`;
      if (only(sel, el)) return sel;
    }
    const sel = [anchor, ...steps].join(" > ");
    return only(sel, el) ? sel : null;
  };
  const unique = (el) => {
    const id = stableId(el);
    if (id) return id;
    const tag = tagOf(el);
    const attrs = ATTRS.map((name) => attr(el, name)).filter(Boolean);
    const cls = classes(el).map((c) => `.${esc(c)}`);
    const local = [...attrs.map((a) => tag + a)];
    for (let i = 0; i < attrs.length; i++) {
      for (let j = i + 1; j < attrs.length; j++) local.push(tag + attrs[i] + attrs[j]);
    }
    local.push(...cls.map((c) => tag + c));
    if (cls.length > 1) local.push(tag + cls.join(""));
    for (const sel of local) if (only(sel, el)) return sel;
    // Within an ancestor of its own: "#signup button" where the page has two forms.
    let anchors = 0;
    for (let up = el.parentElement; up && anchors < 3; up = up.parentElement) {
      const anchor = stableId(up);
      if (!anchor) continue;
      anchors++;
      const found = [tag, ...local].map((sel) => `${anchor} ${sel}`).find((sel) => only(sel, el));
      if (found) return found;
    }
    return path(el);
  };
  return {all, generated, stableId, classes, sig, step, only, unique};
})()
"""
