// The runs list: newest first, filtered (status, workflow, session, root, id), counted by
// status, keyset-paged, and live through the runs feed.

import { Stream, enc, getJson } from "./console-api.js";
import { badge, duration, empty, h, idText, replace, row, time } from "./console-dom.js";

const PAGE = 50;
const STATUSES = ["queued", "running", "waiting", "completed", "failed", "timed_out", "cancelled"];
const FILTERS = [
  ["workflow", "Workflow", "code-review"],
  ["session", "Session", "pi-…"],
  ["root", "Root run", "root run id"],
  ["id", "Run id", "exact run id"],
];

export function runPath(runId) {
  return "/console/runs/" + enc(runId);
}

function filtersOf(params) {
  const filters = {};
  for (const name of ["status", "workflow", "session", "root", "id"]) {
    const value = params.get(name);
    if (value) filters[name] = value;
  }
  return filters;
}

function query(filters, extra = {}) {
  const search = new URLSearchParams({ ...filters, ...extra });
  const text = search.toString();
  return text ? "?" + text : "";
}

export function runsView(root, params, nav) {
  const filters = filtersOf(params);
  // The keyset cursors of the pages seen so far: [null, after page 1, after page 2, ...].
  const state = { cursors: [null], page: 0, position: 0, runs: [], refresh: null };
  const countsBar = h("div", { class: "counts", role: "group", "aria-label": "Runs by status",
                               "data-testid": "counts" });
  const form = filterForm(filters, nav);
  const tbody = h("tbody", { "data-testid": "runs" });
  const info = h("span", { class: "muted", "aria-live": "polite", "data-testid": "page-info" });
  const newer = h("button", { type: "button", text: "Newer", disabled: true });
  const older = h("button", { type: "button", text: "Older", disabled: true });
  const message = h("div", { "data-testid": "runs-message" });
  newer.addEventListener("click", () => { state.page -= 1; load(); });
  older.addEventListener("click", () => { state.page += 1; load(); });

  root.replaceChildren(
    h("h1", { class: "page-title", text: "Runs" }),
    countsBar,
    form,
    message,
    h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Runs" },
      h("table", { class: "cards runs" },
      h("caption", { class: "sr-only", text: "Runs, newest first" }),
      h("thead", {}, h("tr", {}, COLUMNS.map(([name]) => h("th", { scope: "col", text: name })))),
      tbody)),
    h("nav", { class: "pager", "aria-label": "Runs pages" }, newer, older, info),
  );

  function renderCounts(counts) {
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const chip = (status, count) => {
      const active = (filters.status || "") === status;
      const button = h("button", { type: "button", class: "chip" + (active ? " active" : ""),
        "aria-pressed": String(active), id: "status-chip-" + (status || "all"),
        dataset: { status: status || "all" } },
        status ? badge(status) : h("span", { text: "all" }), " ",
        h("span", { class: "count", text: String(count) }));
      button.addEventListener("click", () => {
        const next = { ...filters };
        if (status) next.status = status; else delete next.status;
        nav("/console" + query(next));
      });
      return button;
    };
    replace(countsBar, chip("", filters.status ? counts[filters.status] ?? 0 : total),
      ...STATUSES.filter((s) => s in counts).map((s) => chip(s, counts[s])));
  }

  function render(page) {
    state.runs = page.runs;
    replace(tbody, ...page.runs.map((run) => runRow(run, nav)));
    if (!page.runs.length) {
      message.replaceChildren(empty(Object.keys(filters).length ? "No run matches these filters."
                                                                  : "No runs yet."));
    } else {
      message.replaceChildren();
    }
    state.cursors[state.page + 1] = page.next_before;
    newer.disabled = state.page === 0;
    older.disabled = !page.next_before;
    const first = state.page * PAGE + 1;
    info.textContent = page.runs.length
      ? "runs " + first + "–" + (first + page.runs.length - 1) : "";
    renderCounts(page.counts);
  }

  async function load() {
    const before = state.cursors[state.page];
    const extra = { limit: PAGE };
    if (before) extra.before = before;
    try {
      const page = await getJson("/console/api/runs" + query(filters, extra));
      if (!state.position) state.position = page.position;
      render(page);
      performance.mark("console:runs-render");
    } catch (error) {
      message.replaceChildren(h("p", { class: "error", role: "alert", text: error.message }));
    }
  }

  // A change to any run re-reads the page on view (its keyset cursor keeps it in place) and
  // its counts; changes in a burst are read once.
  function changed(runs) {
    for (const run of runs) {
      const shown = tbody.querySelector('tr[data-run-id="' + CSS.escape(run.run_id) + '"]');
      if (shown) shown.replaceWith(runRow(run, nav, true));
    }
    if (state.refresh) return;
    state.refresh = setTimeout(() => { state.refresh = null; load(); }, 150);
  }

  let stream = null;
  load().then(() => {
    stream = new Stream(() => "/console/api/feed?after=" + state.position, (name, data) => {
      if (name !== "runs") return null;
      state.position = data.position;
      if (data.runs.length) changed(data.runs);
      return null;
    });
  });
  return () => {
    if (stream) stream.close();
    clearTimeout(state.refresh);
  };
}

const COLUMNS = [
  ["Run", (run, nav) => h("div", { class: "run-cell" },
    idText(run.run_id, { href: runPath(run.run_id), link: linkTo(nav, runPath(run.run_id)) }),
    run.title ? h("div", { class: "muted small", text: run.title }) : null)],
  ["Status", (run) => h("span", {}, badge(run.status), run.paused ? badge("paused", "tag") : null)],
  ["Workflow", (run) => h("span", { class: "id", title: run.workflow_ref, text: run.workflow_name })],
  ["Lineage", (run) => run.lineage_kind
    ? h("span", {}, run.lineage_kind + (run.restart_number ? " #" + run.restart_number : "")
        + " of ", idText(run.parent_run_id))
    : h("span", { class: "muted", text: "root" })],
  ["Session", (run) => idText(run.origin_session_id)],
  ["Started", (run) => time(run.created_at)],
  ["Finished", (run) => run.finished_at && !["running", "waiting", "queued"].includes(run.status)
    ? time(run.finished_at) : h("span", { class: "muted", text: "–" })],
  ["Duration", (run) => duration(run.created_at,
    ["running", "waiting", "queued"].includes(run.status) ? null : run.finished_at)],
];

function runRow(run, nav, flash = false) {
  const columns = COLUMNS.map(([name, content]) => [name, (item) => content(item, nav)]);
  return row(columns, run, () => ({
    class: "run-row" + (flash ? " flash" : ""), dataset: { runId: run.run_id, status: run.status },
  }));
}

export function linkTo(nav, path) {
  return (event) => {
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    nav(path);
  };
}

function filterForm(filters, nav) {
  const fields = FILTERS.map(([name, label, placeholder]) => h("label", { class: "field" },
    h("span", { text: label }),
    h("input", { name, value: filters[name] || "", placeholder, autocomplete: "off",
                 spellcheck: "false" })));
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
    ...fields,
    h("div", { class: "field buttons" },
      h("button", { type: "submit", class: "primary", text: "Apply" }),
      h("button", { type: "reset", text: "Clear" })));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = filters.status ? { status: filters.status } : {};
    for (const [name] of FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) next[name] = value;
    }
    nav("/console" + query(next));
  });
  form.addEventListener("reset", (event) => {
    event.preventDefault();
    nav("/console");
  });
  return form;
}
