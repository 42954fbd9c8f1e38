// Small DOM helpers shared by the console's views: elements, ids, times, badges, JSON.
// No framework: each view builds its DOM with h() and replaces what changed.

export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "text") element.textContent = String(value);
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

// replaceChildren that leaves out null, undefined and false, as h() does.
export function replace(element, ...children) {
  // A live update redraws a part while a keyboard user may be on one of its controls: the
  // control is found again in the new children (by test id, id or link) and keeps the focus, or
  // the user's Enter would land on the page's body (and their place in the Tab order be lost).
  const focused = document.activeElement;
  const key = focused !== element && element.contains(focused) ? focusKey(focused) : null;
  element.replaceChildren();
  append(element, children);
  const again = key ? element.querySelector(key) : null;
  if (again) again.focus({ preventScroll: true });
  return element;
}

function focusKey(node) {
  if (node.dataset && node.dataset.testid) return `[data-testid="${CSS.escape(node.dataset.testid)}"]`;
  if (node.id) return "#" + CSS.escape(node.id);
  const href = node.tagName === "A" ? node.getAttribute("href") : null;
  return href ? `a[href="${CSS.escape(href)}"]` : null;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function text(value) {
  return value === null || value === undefined || value === "" ? "–" : String(value);
}

// -- times -----------------------------------------------------------------------------------
export function shownTime(at) {
  // Records spell UTC as "Z" or "+00:00": show one form, to the second, in UTC.
  if (!at) return "–";
  const time = new Date(at);
  return isNaN(time) ? String(at) : time.toISOString().replace("T", " ").slice(0, 19) + "Z";
}

export function duration(from, to) {
  if (!from) return "–";
  const end = to ? new Date(to) : new Date();
  const ms = end - new Date(from);
  if (!(ms >= 0)) return "–";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " m " + Math.floor(s % 60) + " s";
  const hours = Math.floor(m / 60);
  if (hours < 48) return hours + " h " + (m % 60) + " m";
  return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
}

export function time(at) {
  return h("time", { datetime: at || null, title: at || null, text: shownTime(at) });
}

// -- ids -------------------------------------------------------------------------------------
export async function copy(value, button) {
  try {
    await navigator.clipboard.writeText(value);
    flash(button, "copied");
  } catch {
    // Without clipboard access (plain http on another host) select the text instead.
    const field = h("input", { value, "aria-label": "id to copy", class: "copy-field" });
    button.after(field);
    field.select();
    flash(button, "select + copy");
  }
}

function flash(button, label) {
  const before = button.textContent;
  button.textContent = label;
  setTimeout(() => { button.textContent = before; }, 1200);
}

export function copyButton(value, what = "id") {
  const button = h("button", {
    type: "button", class: "copy", title: "Copy " + what, "aria-label": "Copy " + what + " " + value,
    text: "copy",
  });
  button.addEventListener("click", (event) => {
    event.preventDefault();
    event.stopPropagation();
    copy(value, button);
  });
  return button;
}

// An id cut with an ellipsis where space runs out, its full value on hover and in the copy.
export function idText(value, { href = null, link = null } = {}) {
  if (!value) return h("span", { class: "muted", text: "–" });
  const label = h("span", { class: "id", title: value, text: value });
  if (!href) return label;
  const anchor = h("a", { href, class: "id", title: value, text: value, "data-link": "" });
  if (link) anchor.addEventListener("click", link);
  return anchor;
}

export function idWithCopy(value, options = {}) {
  return h("span", { class: "id-copy" }, idText(value, options), value ? copyButton(value) : null);
}

// -- badges ----------------------------------------------------------------------------------
export function badge(value, kind = "status") {
  const shown = value || "–";
  return h("span", { class: "badge " + kind + "-" + String(shown).replace(/[^a-z_-]/gi, ""),
                     text: shown });
}

export function actorText(actor) {
  if (!actor) return "–";
  return actor.id ? actor.type + ":" + actor.id : actor.type;
}

export function cut(prompt, length = 140) {
  // A long prompt shows its start; the button expands it in place.
  const full = String(prompt ?? "");
  if (full.length <= length) return h("span", { class: "prompt", text: full });
  const shown = h("span", { class: "prompt", text: full.slice(0, length) + "…" });
  const button = h("button", { type: "button", class: "link", "aria-expanded": "false",
                               text: "more" });
  button.addEventListener("click", () => {
    const open = button.getAttribute("aria-expanded") === "true";
    shown.textContent = open ? full.slice(0, length) + "…" : full;
    button.textContent = open ? "more" : "less";
    button.setAttribute("aria-expanded", String(!open));
  });
  return h("span", {}, shown, " ", button);
}

// -- JSON ------------------------------------------------------------------------------------
const JSON_ITEMS_SHOWN = 200;

export function jsonView(value, { label = null, open = true } = {}) {
  return h("div", { class: "json" }, jsonNode(value, label, open, 0));
}

function jsonNode(value, label, open, depth) {
  const key = label === null ? null : h("span", { class: "json-key", text: label + ": " });
  if (value === null || typeof value !== "object") {
    return h("div", { class: "json-leaf" }, key, h("code", { class: "json-" + jsonType(value),
                                                              text: JSON.stringify(value) }));
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  const brackets = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  if (entries.length === 0) {
    return h("div", { class: "json-leaf" }, key, h("code", { text: brackets.join("") }));
  }
  const summary = h("summary", {}, key, h("code", { class: "muted",
    text: brackets[0] + " " + entries.length + (Array.isArray(value) ? " items " : " keys ")
      + brackets[1] }));
  const details = h("details", { class: "json-node" }, summary);
  if (open && depth < 2) details.open = true;
  const body = h("div", { class: "json-body" });
  for (const [name, item] of entries.slice(0, JSON_ITEMS_SHOWN)) {
    body.append(jsonNode(item, name, open, depth + 1));
  }
  if (entries.length > JSON_ITEMS_SHOWN) {
    body.append(h("div", { class: "muted", text: "… " + (entries.length - JSON_ITEMS_SHOWN)
      + " more (download the bundle for all)" }));
  }
  details.append(body);
  return details;
}

function jsonType(value) {
  return value === null ? "null" : typeof value;
}

// -- tables ----------------------------------------------------------------------------------
// Each column: [heading, (item) => content]; on narrow screens rows become labelled cards.
export function table(columns, items, { caption = null, rowProps = null, testid = null } = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", { scope: "col",
                                                                             text: name }))));
  const body = h("tbody", { "data-testid": testid });
  for (const item of items) body.append(row(columns, item, rowProps));
  // Focusable, so a keyboard can scroll a table wider than its panel.
  return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    h("table", { class: "cards" }, caption ? h("caption", { class: "sr-only", text: caption }) : null,
      head, body));
}

export function row(columns, item, rowProps = null) {
  return h("tr", rowProps ? rowProps(item) : {}, columns.map(([name, content]) => {
    const value = content(item);
    return h("td", { "data-label": name }, value instanceof Node ? value : text(value));
  }));
}

export function empty(message) {
  return h("p", { class: "empty muted", text: message });
}

export function definitions(pairs, testid = null) {
  return h("dl", { class: "facts", "data-testid": testid }, pairs.map(([name, value]) => [
    h("dt", { text: name }),
    h("dd", { dataset: { field: name } }, value instanceof Node ? value : text(value)),
  ]));
}
