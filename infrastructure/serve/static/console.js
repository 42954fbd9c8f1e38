// The run console's entry: routes URLs to views with the History API, asks for the token
// when the server refuses without one, and keeps the connection indicator truthful.
//   /console?status=…&workflow=…   the runs list (also at /)
//   /console/runs/<run id>          one run

import { HttpError, auth, connection, getJson } from "./console-api.js";
import { h, shownTime } from "./console-dom.js";
import { runView } from "./console-run.js";
import { runsView } from "./console-runs.js";

const view = document.getElementById("view");
const indicator = document.getElementById("connection");
const tokenButton = document.getElementById("token-button");
let closeView = null;
const access = { reads: false, writes: false };

function navigate(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  route();
}

let routed = null;

async function route() {
  routed = location.pathname + location.search;
  if (closeView) closeView();
  closeView = null;
  const url = new URL(location.href);
  const match = url.pathname.match(/^\/console\/runs\/(.+)$/);
  try {
    Object.assign(access, await getJson("/console/api/access"));
  } catch (error) {
    if (error instanceof HttpError && error.status === 401) {
      showTokenPrompt();
      return;
    }
    view.replaceChildren(h("p", { class: "error", role: "alert", text: error.message }));
    return;
  }
  tokenButton.textContent = auth.token ? (access.writes ? "Token: may write" : "Token: read only")
                                       : "Sign in";
  if (match) {
    const runId = decodeURIComponent(match[1]);
    document.title = runId + " · runledger console";
    closeView = runView(view, runId, navigate, access);
  } else {
    document.title = "Runs · runledger console";
    closeView = runsView(view, url.searchParams, navigate);
  }
  view.focus({ preventScroll: true });
}

// -- the token -------------------------------------------------------------------------------
function showTokenPrompt(message = null) {
  if (closeView) closeView();
  closeView = null;
  const input = h("input", { id: "token-input", type: "password", autocomplete: "off",
                             required: true, spellcheck: "false" });
  const form = h("form", { class: "card token-form", "data-testid": "token-prompt",
                           "aria-labelledby": "token-title" },
    h("h1", { id: "token-title", class: "page-title", text: "This server needs its token" }),
    h("p", {}, "Paste the bearer token ", h("code", { text: "runledger serve" }),
      " printed when it started (or the value of ", h("code", { text: "RUNLEDGER_SERVE_TOKEN" }),
      "). It stays in this tab only (sessionStorage) and is never put in a URL."),
    message ? h("p", { class: "error", role: "alert", text: message }) : null,
    h("label", { class: "field", for: "token-input" }, h("span", { text: "Token" }), input),
    h("button", { type: "submit", class: "primary", text: "Connect" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    auth.set(input.value.trim());
    try {
      await getJson("/console/api/access");
    } catch (error) {
      auth.set("");
      showTokenPrompt(error instanceof HttpError && error.status === 401
        ? "The server refused that token." : error.message);
      return;
    }
    route();
  });
  view.replaceChildren(form);
  tokenButton.textContent = "Sign in";
  input.focus();
}

let prompting = false;
auth.listeners.add(() => {
  if (prompting) return;
  prompting = true;
  setTimeout(() => { prompting = false; }, 0);
  showTokenPrompt(auth.token ? "The server refused the token this tab had." : null);
});

tokenButton.addEventListener("click", () => {
  if (auth.token && !confirm("Forget this tab's token?")) return;
  auth.set("");
  showTokenPrompt();
});

// -- the connection indicator ----------------------------------------------------------------
connection.listeners.add((state) => {
  const labels = {
    idle: "not connected",
    connecting: "connecting…",
    connected: "live",
    stopped: "stream stopped",
    reconnecting: "reconnecting" + (state.attempt > 1 ? " (try " + state.attempt + ")" : "") + "…",
    stale: "stale since " + (state.since ? shownTime(new Date(state.since).toISOString()).slice(11)
                                         : "start"),
  };
  const label = labels[state.name] || state.name;
  if (indicator.dataset.state !== state.name || indicator.textContent !== label) {
    indicator.dataset.state = state.name;
    indicator.textContent = label;
    indicator.title = state.error ? "last error: " + state.error : "";
  }
});

// -- links -----------------------------------------------------------------------------------
document.getElementById("home").addEventListener("click", (event) => {
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate("/console");
});
// A jump to a section (#panel-…) is a history entry too: only a new path or query re-routes.
window.addEventListener("popstate", () => {
  if (location.pathname + location.search !== routed) route();
});
route();
