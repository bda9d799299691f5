"""What a page offers to read (browser_candidates, purpose "read"): its groups of alike
elements (list items, table rows, cards), each with one selector for all its items,
and the single short values an id or a class of their own marks ("Total: 42")."""

from __future__ import annotations

from services.tools.accessible import ACCESSIBLE_JS
from services.tools.css_paths import CSS_PATHS_JS

# Runs in the page, in one evaluate: READ_JS(args), args = {limit, samples, parts,
# scan, text}; returns {candidates, truncated} (contracts.tools.Candidate fields).
#
# - Items are alike when they share a tag and class signature and sit side by side:
#   siblings, or cousins (their parents alike and siblings: cards each in a column).
#   Side-by-side elements of one tag are split by class (div.card apart from
#   div.header), except in a list or a table, whose items all belong (tr.odd and
#   tr.even are rows) unless one class marks nearly all (li.story, without the li.ad).
# - A group needs two shown items holding text, alike inside too (sections holding a
#   list and a table are no group). A group of mere wrappers (each item one element
#   and no text of its own) gives way to what they wrap: columns to their cards.
# - Groups nested in the items of an earlier one are its parts, not groups of their
#   own: a story's title and points, a row's cells; so are the cells of a lone row (a
#   table's header).
# - The selector matches the shown items of the group and no other shown element (the
#   hidden ones browser_extract skips anyway): checked here with querySelectorAll, and
#   `count` is that number. At most `scan` elements are looked at: a list running past
#   them is counted in full, its selector matching nothing else among those looked at.
READ_JS = """
(args) => {
  const a11y = ACCESSIBLE_JS;
  const css = CSS_PATHS_JS;
  const body = document.body;
  if (!body) return {candidates: [], truncated: false};
  const HTML = "http://www.w3.org/1999/xhtml";
  // Not text a person reads: controls, media, scripts, line breaks.
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "BR", "HR", "WBR",
    "INPUT", "SELECT", "OPTION", "OPTGROUP", "TEXTAREA", "BUTTON", "IFRAME", "IMG",
    "PICTURE", "SOURCE", "VIDEO", "AUDIO", "CANVAS", "OBJECT", "EMBED", "LINK", "META"]);
  const LISTS = new Set(["UL", "OL", "MENU", "DL", "TABLE", "THEAD", "TBODY", "TFOOT"]);
  const LIST_ROLES = /^(list|rowgroup|grid|table|treegrid|listbox|menu|tablist|feed)$/;
  const elements = [...body.getElementsByTagName("*")].slice(0, args.scan);
  const order = new Map(elements.map((el, i) => [el, i]));
  const kept = elements.filter((el) => el.namespaceURI === HTML && !SKIP.has(el.tagName));
  const memo = (fn) => {
    const seen = new Map();
    return (el) => {
      if (!seen.has(el)) seen.set(el, fn(el));
      return seen.get(el);
    };
  };
  const visible = memo(a11y.visible);
  const textOf = memo(a11y.text);
  const sig = memo(css.sig);
  const shape = memo((el) => new Set([...el.getElementsByTagName("*")].slice(0, 40).map(sig)));

  // Elements side by side: by grandparent, parent signature and tag.
  const keys = new Map();
  const buckets = new Map();
  for (const el of kept) {
    const parent = el.parentElement;
    const grand = parent?.parentElement;
    if (!grand) continue;
    if (!keys.has(grand)) keys.set(grand, keys.size);
    const key = `${keys.get(grand)} ${sig(parent)} ${el.tagName}`;
    if (!buckets.has(key)) buckets.set(key, {grand, parentSig: sig(parent), members: []});
    buckets.get(key).members.push(el);
  }

  const common = (items) =>
    css.classes(items[0]).filter((c) => items.every((m) => m.classList.contains(c))).sort();
  // A bucket's groups: {items, sig}.
  const split = (members) => {
    const first = members[0];
    const list = LISTS.has(first.parentElement.tagName)
      || LIST_ROLES.test(first.parentElement.getAttribute("role") ?? "");
    const tag = CSS.escape(first.tagName.toLowerCase());
    const groups = [];
    const taken = [];
    const takenItems = [];
    const signed = (items) => {
      const own = tag + common(items).map((c) => `.${CSS.escape(c)}`).join("");
      // Apart from the groups taken before, when it would match them too.
      const nots = taken.map((c) => `:not(.${CSS.escape(c)})`).join("");
      return takenItems.some((m) => m.matches(own)) ? own + nots : own;
    };
    let rest = members;
    while (rest.length >= 2) {
      const counts = new Map();
      for (const m of rest) for (const c of css.classes(m)) counts.set(c, (counts.get(c) ?? 0) + 1);
      let best = null;
      for (const [c, n] of counts) if (n >= 2 && n > (counts.get(best) ?? 0)) best = c;
      if (!best || (list && counts.get(best) < 0.8 * rest.length)) break;
      const items = rest.filter((m) => m.classList.contains(best));
      groups.push({items, sig: signed(items)});
      taken.push(best);
      takenItems.push(...items);
      rest = rest.filter((m) => !m.classList.contains(best));
      if (list) break;
    }
    if (rest.length >= 2) groups.push({items: rest, sig: signed(rest)});
    return groups;
  };
  const withText = (items) => {
    let n = 0;
    for (const m of items) if (textOf(m) && ++n === 2) return true;
    return false;
  };
  const alike = (items) => {
    const pairs = Math.min(items.length - 1, 5);
    let good = 0;
    for (let i = 0; i < pairs; i++) {
      const a = shape(items[i]);
      const b = shape(items[i + 1]);
      const both = [...a].filter((s) => b.has(s)).length;
      const either = a.size + b.size - both;
      if (either <= 2 || both >= either / 2) good++;
    }
    return 2 * good >= pairs;
  };
  const wrapper = (items) => items.every((m) => m.childElementCount === 1
    && !SKIP.has(m.firstElementChild.tagName) && !a11y.ownText(m)
    && m.firstElementChild.tagName === items[0].firstElementChild.tagName);
  // Wrappers give way to what they wrap (li > h2 > a: the links), which keeps its way
  // there for a selector (`up`), since cousins further apart share no bucket.
  const unwrapped = (group) => {
    while (wrapper(group.items)) {
      const items = group.items.map((m) => m.firstElementChild).filter(visible);
      if (!withText(items)) return null;
      const tag = CSS.escape(items[0].tagName.toLowerCase());
      const own = tag + common(items).map((c) => `.${CSS.escape(c)}`).join("");
      group = {items, sig: own, up: group};
    }
    return group;
  };

  // A bucket's group as offered, or null; looked at only when its turn comes, so the
  // groups inside an earlier group's items (its parts) cost nothing.
  const offered = (group) => {
    const items = group.items.filter(visible);
    if (!withText(items) || !alike(items)) return null;
    // The cells of one row are a record's fields (its parts), not a list.
    const row = items[0].parentElement;
    if (/^T[DH]$/.test(items[0].tagName) && items.every((m) => m.parentElement === row)) {
      return null;
    }
    return unwrapped({...group, items});
  };
  const events = [];
  for (const bucket of buckets.values()) {
    if (bucket.members.length < 2) continue;
    for (const group of split(bucket.members)) {
      const first = group.items[0];
      events.push({at: order.get(first), first, group: {...group, bucket}});
    }
  }
  // Single values: short own text (`text` chars) with a digit, on an element with an
  // id or a class.
  for (const el of kept) {
    if (!(el.id || el.classList.length)) continue;
    const own = a11y.ownText(el);
    if (own && own.length <= args.text && /\\d/.test(own)) {
      events.push({at: order.get(el), first: el});
    }
  }
  events.sort((a, b) => a.at - b.at);

  const groupSelector = (group) => {
    if (group.chosen === undefined) group.chosen = selectorOf(group);
    return group.chosen;
  };
  // {selector, count}: the first selector whose shown matches are the group's items,
  // and past the scan (a giant list) only more of them; count: its shown matches.
  const selectorOf = ({items, sig: own, bucket, up}) => {
    const members = new Set(items);
    const counted = (selector) => {
      const found = [...css.all(selector)].filter(visible);
      const ours = found.filter((el) => members.has(el)).length;
      const ok = ours === members.size && found.every((el) => members.has(el) || !order.has(el));
      return ok ? {selector, count: found.length} : null;
    };
    // A bare tag ("a", "tr") matches what the page adds next: tried after the others.
    const bare = !own.includes(".");
    const first = (tries) => {
      for (const sel of bare ? [...tries.slice(1), own] : tries) {
        const chosen = counted(sel);
        if (chosen) return chosen;
      }
      return null;
    };
    if (up) {
      const outer = groupSelector(up)?.selector;
      return first([own, ...(outer ? [`${outer} > ${own}`] : [])]);
    }
    const parent = bucket.parentSig;
    const tries = [own, `${parent} > ${own}`];
    let anchors = 0;
    for (let up = items[0].parentElement; up && anchors < 3; up = up.parentElement) {
      const anchor = css.stableId(up);
      if (!anchor) continue;
      anchors++;
      tries.push(`${anchor} ${own}`, `${anchor} ${parent} > ${own}`);
    }
    const grand = css.unique(bucket.grand);
    if (grand) tries.push(`${grand} > ${parent} > ${own}`);
    return first(tries);
  };
  // A part of an item: tag.class, or tag:nth-of-type(k) when it has no class, else
  // its path from the item; always one the item's querySelector finds it by.
  const relative = (el, item) => {
    const tag = CSS.escape(el.tagName.toLowerCase());
    const classes = css.classes(el).map((c) => `.${CSS.escape(c)}`).join("");
    const tries = classes ? [tag + classes] : [css.step(el)];
    const steps = [];
    for (let up = el; up && up !== item; up = up.parentElement) steps.unshift(css.step(up));
    tries.push(`:scope > ${steps.join(" > ")}`);
    return tries.find((sel) => item.querySelector(sel) === el) ?? null;
  };
  const partsOf = (item) => {
    const parts = {};
    let n = 0;
    for (const el of item.getElementsByTagName("*")) {
      if (n >= args.parts) break;
      if (SKIP.has(el.tagName) || !a11y.ownText(el) || !visible(el)) continue;
      const sel = relative(el, item);
      if (sel === null || Object.hasOwn(parts, sel)) continue;
      parts[sel] = textOf(el);
      n++;
    }
    return parts;
  };
  const singleSelector = (el) => {
    const id = css.stableId(el);
    if (id) return id;
    const tag = CSS.escape(el.tagName.toLowerCase());
    const sel = css.classes(el).map((c) => `${tag}.${CSS.escape(c)}`).find((s) => css.only(s, el));
    return sel ?? null;
  };

  const claimed = new Set();
  const inClaimed = (el) => {
    for (let up = el; up; up = up.parentElement) if (claimed.has(up)) return true;
    return false;
  };
  const found = [];
  for (const event of events) {
    if (found.length > args.limit) break;
    if (inClaimed(event.first)) continue;
    const group = event.group && offered(event.group);
    const first = group ? group.items[0] : event.first;
    const base = {role: a11y.role(first), tag: first.tagName.toLowerCase()};
    if (!event.group) {
      const selector = visible(first) && singleSelector(first);
      if (selector) found.push({...base, selector, count: 1, samples: [textOf(first)]});
      continue;
    }
    const chosen = group && groupSelector(group);
    if (!chosen) continue;
    group.items.forEach((m) => claimed.add(m));
    found.push({...base, ...chosen, samples: group.items.slice(0, args.samples).map(textOf),
      parts: partsOf(first)});
  }
  return {candidates: found.slice(0, args.limit), truncated: found.length > args.limit};
}
""".replace("ACCESSIBLE_JS", ACCESSIBLE_JS.strip()).replace("CSS_PATHS_JS", CSS_PATHS_JS.strip())
