// One run's page: header, values, lineage, follow-ups, messages, decisions, settings,
// session, effects, progress, lease, event history and audit, live through the run's viewer
// stream and the runs feed. The header and the follow-ups' first page render first; the rest
// follows from the run's overview.

import { HttpError, Stream, auth, enc, getJson, request } from "./console-api.js";
import {
  actorText, badge, copyButton, cut, definitions, duration, empty, h, idText, idWithCopy,
  jsonView, replace, table, text, time,
} from "./console-dom.js";
import { linkTo, runPath } from "./console-runs.js";

const FOLLOW_UP_PAGE = 100;
const EVENTS_PAGE = 100;
const LIVE = ["running", "waiting", "queued"];
const EFFECT_STATES = ["applying", "applied", "failed", "retry_ready", "ambiguous"];

const PANELS = [
  ["values", "Input, output and error"],
  ["lineage", "Lineage"],
  ["progress", "Progress"],
  ["follow-ups", "Follow-up queue"],
  ["messages", "Workflow messages"],
  ["decisions", "Human decisions"],
  ["settings", "Settings"],
  ["session", "Session recording"],
  ["effects", "Effects"],
  ["lease", "Lease"],
  ["events", "Event history"],
  ["audit", "Audit"],
];

export function runView(root, runId, nav, access) {
  const state = {
    run: null, overview: null, revision: 0, followUps: [], followUpsShown: FOLLOW_UP_PAGE,
    events: [], eventsNext: null, wireName: "", verdict: null, timer: null, closed: false,
  };
  const panels = {};
  const header = h("section", { class: "run-header card", "aria-labelledby": "run-title",
                                "data-testid": "run-header" },
    h("p", { class: "muted", text: "Loading run…" }));
  const toc = h("nav", { class: "toc", "aria-label": "Run sections" },
    h("ul", {}, PANELS.map(([id, title]) => h("li", {}, h("a", { href: "#panel-" + id,
                                                                  text: title })))));
  root.replaceChildren(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "/console", text: "Runs", onclick: linkTo(nav, "/console") }), " › ",
      idText(runId)),
    header, toc,
    h("div", { class: "panels" }, PANELS.map(([id, title]) => {
      const body = h("div", { class: "panel-body", "data-testid": id },
        h("p", { class: "muted", text: "Loading…" }));
      panels[id] = body;
      const count = h("span", { class: "count muted", "data-testid": id + "-count" });
      panels[id + ":count"] = count;
      return h("section", { class: "card panel panel-" + id, id: "panel-" + id,
                            "aria-labelledby": "heading-" + id },
        h("h2", { id: "heading-" + id }, title, " ", count), body);
    })),
  );

  // -- loading ---------------------------------------------------------------------------------
  const base = "/runs/" + enc(runId);
  const consoleBase = "/console/api/runs/" + enc(runId);

  async function loadRun() {
    state.run = await getJson(base);
    renderHeader();
  }

  async function loadFollowUps() {
    const limit = state.followUpsShown;
    let queue;
    try {
      queue = await getJson(base + "/follow-up-queue?start=0&limit=" + limit);
    } catch (error) {
      if (error instanceof HttpError && error.status === 404) queue = null;
      else throw error;
    }
    state.followUps = queue ? queue.follow_ups : null;
    renderFollowUps();
  }

  async function loadOverview() {
    state.overview = await getJson(consoleBase + "/overview");
    state.run = state.overview.run;
    renderHeader();
    renderOverview();
  }

  async function loadEvents(more = false) {
    const after = more ? state.eventsNext : 0;
    const params = new URLSearchParams({ after: String(after || 0), limit: String(EVENTS_PAGE) });
    if (state.wireName) params.set("wire_name", state.wireName);
    const page = await getJson(consoleBase + "/events?" + params);
    state.events = more ? state.events.concat(page.events) : page.events;
    state.eventsNext = page.next_after;
    renderEvents();
  }

  function failed(error) {
    if (state.closed) return;
    if (error instanceof HttpError && error.status === 404) {
      root.replaceChildren(h("section", { class: "card", role: "alert", "data-testid": "not-found" },
        h("h1", { class: "page-title", text: "Run not found" }),
        h("p", {}, "No run has the id ", h("code", { class: "id", text: runId }), "."),
        h("p", {}, h("a", { href: "/console", onclick: linkTo(nav, "/console"),
                            text: "Back to the runs" }))));
      close();
      return;
    }
    if (error instanceof HttpError && error.status === 401) return;  // the token prompt shows
    header.replaceChildren(h("p", { class: "error", role: "alert", text: error.message }));
  }

  // A change re-reads what the page shows, once per burst of changes.
  function changed() {
    if (state.timer || state.closed) return;
    state.timer = setTimeout(() => {
      state.timer = null;
      Promise.all([loadFollowUps(), loadOverview(), loadEvents()]).catch(failed);
    }, 120);
  }

  // -- header ----------------------------------------------------------------------------------
  function renderHeader() {
    const run = state.run;
    if (!run) return;
    const ended = !LIVE.includes(run.status);
    const verify = h("button", { type: "button", text: "Verify (audit --verify)",
                                 "data-testid": "verify" });
    verify.addEventListener("click", () => runVerify(verify));
    const download = h("button", { type: "button", text: "Download bundle",
                                   "data-testid": "bundle" });
    download.addEventListener("click", () => downloadBundle(download));
    replace(header,
      h("div", { class: "run-title-row" },
        h("h1", { id: "run-title", class: "run-title" }, h("span", { class: "sr-only",
                                                                      text: "Run " }),
          idText(run.run_id)),
        copyButton(run.run_id, "run id"),
        badge(run.status), run.paused ? badge("paused", "tag") : null),
      run.title ? h("p", { class: "run-subtitle", text: run.title }) : null,
      definitions([
        ["workflow", run.workflow_name + (run.workflow_ref ? " (" + run.workflow_ref + ")" : "")],
        ["session", idText(run.origin_session_id)],
        ["mode", run.execution_mode],
        ["started", time(run.created_at)],
        ["updated", time(run.updated_at)],
        ["finished", ended ? time(run.finished_at) : "–"],
        ["duration", duration(run.created_at, ended ? run.finished_at : null)],
        ["current node", run.current_node],
        ["attempt", run.current_attempt_id],
        ["waiting on", run.waiting_on],
        ["detail", run.status_detail],
        ["revision", h("span", { "data-testid": "revision", text: String(state.revision) })],
      ], "run-facts"),
      h("div", { class: "actions" }, verify, download,
        h("span", { class: "verdict", "data-testid": "verdict", "aria-live": "polite" },
          state.verdict ? verdictText(state.verdict) : null)),
    );
    renderValues();
    renderProgress();
  }

  async function runVerify(button) {
    button.disabled = true;
    // Looked up again after the wait: a live update may have drawn the header anew meanwhile.
    const shown = () => header.querySelector("[data-testid=verdict]");
    shown().textContent = "verifying…";
    try {
      state.verdict = await getJson(base + "/verification");
      shown().replaceChildren(verdictText(state.verdict));
      renderAudit();
    } catch (error) {
      shown().textContent = error.message;
    } finally {
      button.disabled = false;
    }
  }

  async function downloadBundle(button) {
    button.disabled = true;
    try {
      const response = await request(consoleBase + "/bundle");
      const blob = await response.blob();
      const link = h("a", { href: URL.createObjectURL(blob),
                            download: runId.replace(/[^A-Za-z0-9._-]/g, "_") + ".bundle.jsonl" });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    } catch (error) {
      header.querySelector("[data-testid=verdict]").textContent = error.message;
    } finally {
      button.disabled = false;
    }
  }

  // -- panels ----------------------------------------------------------------------------------
  function set(id, ...content) {
    replace(panels[id], ...content);
  }

  function count(id, value) {
    panels[id + ":count"].textContent = value === null || value === undefined ? "" : "(" + value + ")";
  }

  function renderValues() {
    const run = state.run;
    const value = (title, content, testid, isError = false) => h("details", {
      class: "value" + (isError ? " value-error" : ""), open: true, "data-testid": testid },
      h("summary", { text: title }), content);
    set("values",
      value("Input", jsonView(run.input), "input"),
      value("Final output", run.final_output === null ? empty("No final output.")
                                                       : jsonView(run.final_output), "output"),
      value("Error", run.error ? h("pre", { class: "error-text", text: run.error })
                               : empty("No error."), "error", Boolean(run.error)),
      run.presentation_instructions
        ? value("Presentation instructions", h("p", { text: run.presentation_instructions }),
                "instructions") : null);
  }

  function renderProgress() {
    const run = state.run;
    const updates = run.updates || [];
    count("progress", updates.length);
    set("progress",
      definitions([["current node", run.current_node], ["attempt", run.current_attempt_id],
                   ["waiting on", run.waiting_on], ["detail", run.status_detail]]),
      updates.length ? table([
        ["#", (u) => u.seq],
        ["type", (u) => u.update_type],
        ["key", (u) => u.key],
        ["attempt", (u) => u.attempt_id],
        ["data", (u) => jsonView(u.data, { open: false })],
        ["at", (u) => time(u.published_at)],
      ], updates.slice().reverse(), { caption: "Progress updates" }) : empty("No progress updates."));
  }

  function renderFollowUps() {
    const items = state.followUps;
    if (items === null) {
      count("follow-ups", null);
      set("follow-ups", empty("No queue: the run has no origin session."));
      return;
    }
    const total = state.overview ? state.overview.wire_names["follow-up.queued"] || 0 : null;
    count("follow-ups", total ?? items.length);
    const more = items.length >= state.followUpsShown
      ? h("button", { type: "button", text: "Show " + FOLLOW_UP_PAGE + " more",
                      onclick: () => { state.followUpsShown += FOLLOW_UP_PAGE;
                                       loadFollowUps().catch(failed); } })
      : null;
    set("follow-ups",
      items.length ? table([
        ["#", (f) => f.order],
        ["prompt", (f) => cut(f.prompt)],
        ["actor", (f) => actorText(f.actor)],
        ["source", (f) => f.source],
        ["state", (f) => badge(f.state)],
        ["delivery", (f) => f.delivery ? badge(f.delivery) : "–"],
        ["reason", (f) => f.reason],
        ["queued", (f) => time(f.created_at)],
      ], items, { caption: "Follow-up queue", testid: "follow-up-rows" }) : empty("No follow-ups."),
      more);
  }

  function renderOverview() {
    const o = state.overview;
    renderFollowUps();
    renderLineage(o.lineage);
    renderMessages(o.messages, o.messages_total);
    renderDecisions(o.decisions, o.decisions_total);
    renderSettings(o.settings);
    renderSession(o);
    renderEffects(o.effects, o.effects_total);
    renderLease(o.lease);
    renderEventFilter(o.wire_names);
    renderAudit();
  }

  function renderLineage(lineage) {
    count("lineage", lineage.length);
    const children = new Map();
    for (const run of lineage) {
      const key = run.parent_run_id || "";
      if (!children.has(key)) children.set(key, []);
      children.get(key).push(run);
    }
    const known = new Set(lineage.map((r) => r.run_id));
    const tree = (runs) => h("ul", { class: "tree" }, runs.map((run) => {
      const current = run.run_id === runId;
      return h("li", {},
        h("div", { class: "tree-item" + (current ? " current" : "") },
          run.lineage_kind ? h("span", { class: "muted small",
            text: run.lineage_kind + (run.restart_number ? " #" + run.restart_number : "") + " " })
            : h("span", { class: "muted small", text: "root " }),
          current ? h("span", { class: "id current-id", "aria-current": "page", title: run.run_id,
                                text: run.run_id })
                  : idText(run.run_id, { href: runPath(run.run_id),
                                         link: linkTo(nav, runPath(run.run_id)) }),
          " ", badge(run.status)),
        children.has(run.run_id) ? tree(children.get(run.run_id)) : null);
    }));
    const roots = lineage.filter((r) => !r.parent_run_id || !known.has(r.parent_run_id));
    set("lineage", roots.length ? tree(roots) : empty("No lineage."));
  }

  function latest(shown, total, what) {
    return total > shown ? h("p", { class: "muted small", text: "The latest " + shown + " of "
      + total + " " + what + "; the event history holds them all." }) : null;
  }

  function renderMessages(messages, total) {
    count("messages", total);
    set("messages", latest(messages.length, total, "messages"), messages.length ? table([
      ["order", (m) => m.message.order],
      ["kind", (m) => m.message.kind],
      ["delivery", (m) => badge(m.message.status)],
      ["session", (m) => idText(m.message.target_session_id)],
      ["Pi entry", (m) => idText(m.message.pi_session_entry_id)],
      ["turns", (m) => m.turns.length ? h("ul", { class: "plain" }, m.turns.map((t) => h("li", {},
        badge(t.state), " ", t.stop_reason ? t.stop_reason + " " : "", idText(t.workflow_turn_id))))
        : "–"],
      ["content", (m) => jsonView(m.message.content, { open: false })],
      ["created", (m) => time(m.message.created_at)],
    ], messages, { caption: "Workflow messages" }) : empty("No workflow messages."));
  }

  function renderDecisions(decisions, total) {
    count("decisions", total);
    if (!decisions.length) { set("decisions", empty("No human decisions.")); return; }
    set("decisions", latest(decisions.length, total, "decisions"), ...decisions.map((d) => h("article", { class: "decision",
                                                            "data-testid": "decision" },
      h("h3", {}, d.request.title || d.node_id, " ", badge(d.status)),
      definitions([
        ["choices", (d.request.choices || []).join(", ")],
        ["node", d.node_id], ["attempt", d.attempt_id],
        ["deadline", d.expires_at ? time(d.expires_at) : "none"],
        ["default", d.default_response ? JSON.stringify(d.default_response) : "none"],
        ["provenance", d.provenance],
        ["response", d.response ? JSON.stringify(d.response) : "–"],
        ["resolved", d.resolved_at ? time(d.resolved_at) : "–"],
        ["continuation", d.continuation_run_id
          ? idText(d.continuation_run_id, { href: runPath(d.continuation_run_id),
                                            link: linkTo(nav, runPath(d.continuation_run_id)) })
          : "–"],
        ["submissions", d.submissions.length ? h("ul", { class: "plain" }, d.submissions.map(
          (s) => h("li", {}, actorText(s.actor), " ", badge(s.outcome), " ", time(s.submitted_at))))
          : "none"],
      ]),
      d.status === "pending" ? answerForm(d) : null)));
  }

  function answerForm(decision) {
    if (!access.writes) {
      return h("p", { class: "muted", "data-testid": "answer-locked",
                      text: "Answering needs a token that may write." });
    }
    const choices = decision.request.choices || [];
    const name = "choice-" + decision.decision_id;
    const status = h("p", { class: "muted", "aria-live": "polite" });
    const form = h("form", { class: "answer", "data-testid": "answer-form" },
      h("fieldset", {}, h("legend", { text: "Answer" }),
        choices.map((choice, index) => h("label", { class: "choice" },
          h("input", { type: "radio", name, value: choice, required: true,
                       checked: index === 0 }), " ", choice))),
      h("label", { class: "field" }, h("span", { text: "answered by (human id)" }),
        h("input", { name: "actor", required: true, value: "operator", autocomplete: "off" })),
      h("button", { type: "submit", class: "primary", text: "Submit answer" }), status);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const choice = form.querySelector("input[type=radio]:checked");
      try {
        const answer = await (await request("/decisions/" + enc(decision.decision_id) + "/answers", {
          method: "POST",
          body: {
            actor: { type: "human", id: form.elements.actor.value.trim() },
            response: { choice: choice ? choice.value : null },
            submission_id: "console-" + crypto.randomUUID(),
          },
        })).json();
        status.textContent = "answer " + answer.outcome;
        changed();
      } catch (error) {
        status.textContent = error.message;
      }
    });
    return form;
  }

  function renderSettings(scopes) {
    count("settings", scopes.length);
    if (!scopes.length) { set("settings", empty("No settings scopes.")); return; }
    set("settings", ...scopes.map(({ scope, changes }) => h("article", { class: "scope",
                                                                         "data-testid": "scope" },
      h("h3", {}, idText(scope.scope_id), " ", h("span", { class: "muted small",
        text: "change " + scope.change_number })),
      definitions([
        ["mount", scope.mount_path || "$root"], ["invocation", scope.invocation],
        ["origin run", idText(scope.origin_run_id)], ["updated", time(scope.updated_at)],
      ]),
      h("details", { open: true }, h("summary", { text: "Current values" }),
        jsonView(scope.settings)),
      h("details", {}, h("summary", { text: "Policy" }), jsonView(scope.policy)),
      h("h4", { text: "Change history" }),
      changes.length ? table([
        ["#", (c) => c.change_number],
        ["who", (c) => actorText(c.actor)],
        ["when", (c) => time(c.accepted_at)],
        ["source", (c) => c.source],
        ["paths", (c) => c.changed_paths.join(", ")],
        ["patch", (c) => jsonView(c.patch, { open: false })],
      ], changes, { caption: "Settings changes" }) : empty("No changes since it was created."),
      h("p", { class: "muted small", text: "Refused changes write nothing, so the store "
        + "keeps no record of them; the host's error answer is where they show." }))));
  }

  function renderSession(o) {
    count("session", o.segments.length);
    set("session",
      o.segments.length ? table([
        ["segment", (s) => idText(s.segment_id)],
        ["attempt", (s) => s.attempt_id],
        ["session", (s) => idText(s.session_id)],
        ["capture", (s) => badge(s.status)],
        ["entries", (s) => s.entry_count],
        ["events", (s) => s.event_count],
        ["integrity", (s) => badge(s.integrity)],
        ["diagnostics", (s) => s.diagnostics.join("; ") || "–"],
      ], o.segments, { caption: "Session segments" }) : empty("No session recorded."),
      o.session_entries.length ? h("div", {}, h("h3", { text: "Entries" }), table([
        ["#", (e) => e.entry_seq], ["entry", (e) => idText(e.entry_id)],
        ["body", (e) => jsonView(e.entry, { open: false })], ["at", (e) => time(e.recorded_at)],
      ], o.session_entries, { caption: "Session entries" })) : null,
      o.session_events.length ? h("div", {}, h("h3", { text: "Events (tail)" }), table([
        ["#", (e) => e.seq], ["type", (e) => e.type], ["node", (e) => e.node_id],
        ["attempt", (e) => e.attempt_id], ["payload", (e) => jsonView(e.payload, { open: false })],
        ["at", (e) => e.at],
      ], o.session_events, { caption: "Session events" })) : null);
  }

  function renderEffects(effects, total) {
    count("effects", total);
    if (!effects.length) { set("effects", empty("No managed effects.")); return; }
    set("effects", latest(effects.length, total, "effects"), ...effects.map((e) => h("article", { class: "effect", "data-testid": "effect" },
      h("h3", {}, e.effect_type, " ", h("span", { class: "muted", text: e.key }), " ",
        badge(e.status)),
      h("ol", { class: "states", "aria-label": "Effect states" }, EFFECT_STATES.map((s) =>
        h("li", { class: s === e.status ? "on" : "", "aria-current": s === e.status ? "step" : null,
                  text: s }))),
      definitions([
        ["effect", idWithCopy(e.effect_id)], ["attempt", e.attempt], ["outcome", e.outcome],
        ["recovery", e.recovery], ["updated", time(e.updated_at)],
      ]),
      h("details", {}, h("summary", { text: "Request" }), jsonView(e.request)),
      h("details", { open: true }, h("summary", { text: "Result" }), jsonView(e.result)))));
  }

  function renderLease(lease) {
    if (!lease) { count("lease", null); set("lease", empty("No lease was ever taken.")); return; }
    const expired = new Date(lease.expires_at) < new Date();
    const held = !lease.released_at && !expired;
    set("lease", definitions([
      ["holder", lease.owner_type + ":" + lease.owner_id],
      ["state", badge(held ? "held" : lease.released_at ? "released" : "expired")],
      ["generation", lease.generation],
      ["claimed", time(lease.claimed_at)],
      ["expires", time(lease.expires_at)],
      ["released", lease.released_at ? time(lease.released_at) : "–"],
      ["lease", lease.lease_ms + " ms"],
    ], "lease-facts"));
  }

  // -- events ----------------------------------------------------------------------------------
  const filter = h("select", { "aria-label": "Filter events by wire name",
                               "data-testid": "wire-filter" });
  filter.addEventListener("change", () => {
    state.wireName = filter.value;
    loadEvents().catch(failed);
  });
  const eventsBody = h("div", {});

  function renderEventFilter(names) {
    const total = Object.values(names).reduce((a, b) => a + b, 0);
    count("events", total);
    filter.replaceChildren(h("option", { value: "", text: "every event (" + total + ")" }),
      ...Object.entries(names).sort().map(([name, n]) => h("option", {
        value: name, selected: name === state.wireName, text: name + " (" + n + ")" })));
    if (!panels.events.contains(filter)) {
      set("events", h("label", { class: "field inline" }, h("span", { text: "wire name" }),
                      filter), eventsBody);
      renderEvents();
    }
  }

  function renderEvents() {
    if (!panels.events.contains(eventsBody)) return;
    const more = state.eventsNext
      ? h("button", { type: "button", text: "Load more events",
                      onclick: () => loadEvents(true).catch(failed) }) : null;
    replace(eventsBody, state.events.length ? table([
      ["position", (e) => e.position],
      ["at", (e) => time(e.recorded_at)],
      ["wire name", (e) => h("code", { text: e.wire_name })],
      ["actor", (e) => actorText(e.actor)],
      ["payload", (e) => jsonView(e.payload, { open: false })],
    ], state.events, { caption: "Event history", testid: "event-rows" })
      : empty("No events."), more);
  }

  function renderAudit() {
    const verdict = state.verdict;
    set("audit",
      h("p", {}, "Replays and re-projects this run's tree and compares every read model row ",
        "(", h("code", { text: "runledger audit --verify" }), "). Use ",
        h("strong", { text: "Verify" }), " above; ", h("strong", { text: "Download bundle" }),
        " exports what ", h("code", { text: "audit verify-bundle" }), " checks offline."),
      verdict ? definitions([
        ["verdict", verdictText(verdict)], ["runs", verdict.runs.length],
        ["events", verdict.events], ["aggregates", verdict.aggregates],
        ["models", verdict.models.join(", ")],
        ["difference", verdict.difference ? jsonView(verdict.difference) : "none"],
      ], "audit-facts") : null);
  }

  // -- live ------------------------------------------------------------------------------------
  const viewer = new Stream(() => base + "/viewer?after_revision=" + state.revision,
    (name, data) => {
      if (name === "revision") {
        if (data.presentation_revision > state.revision) {
          state.revision = data.presentation_revision;
          const shown = header.querySelector("[data-testid=revision]");
          if (shown) shown.textContent = String(state.revision);
          changed();
        }
      } else if (name === "snapshot_required") {
        // Out of retention: everything is re-read, then the stream resumes from now.
        state.revision = data.current_revision;
        changed();
        return "restart";
      }
      return null;
    });
  // Lineage, effects and the rest need no viewer delta to change: the feed names the runs.
  let feed = null;

  function close() {
    state.closed = true;
    viewer.close();
    if (feed) feed.close();
    clearTimeout(state.timer);
  }

  Promise.all([loadRun(), loadFollowUps()])
    .then(() => {
      // Marks a measurement reads (tests/serve/console_timing.py): the first render, then all.
      performance.mark("console:run-first-render");
      loadOverview().then(() => performance.mark("console:run-overview")).catch(failed);
      loadEvents().catch(failed);
      return getJson("/console/api/runs?limit=1");
    })
    .then((page) => {
      if (state.closed) return;
      let position = page.position;
      feed = new Stream(() => "/console/api/feed?after=" + position, (name, data) => {
        if (name !== "runs") return null;
        position = data.position;
        const root = state.run && state.run.root_run_id;
        if (data.runs.some((r) => r.run_id === runId || r.root_run_id === root)) changed();
        return null;
      });
    })
    .catch(failed);
  return close;
}

function verdictText(verdict) {
  return h("span", { class: verdict.ok ? "ok" : "error" },
    badge(verdict.ok ? "verified" : "differs"), " ",
    verdict.ok ? verdict.events + " events replayed, every read model agrees"
               : "first difference in " + text(verdict.difference && verdict.difference.model));
}

export { auth };
