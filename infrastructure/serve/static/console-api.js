// The console's client of the server: the token (kept in this tab's sessionStorage, never in
// a URL), JSON requests, and server-sent event streams read through fetch (EventSource
// cannot send an Authorization header), each reporting its health to the indicator.

const TOKEN_KEY = "runledger-token";
const STALE_AFTER_MS = 35_000;
// Both streams send a keepalive at least every 15 s: silence beyond two of them is a stall.

export class HttpError extends Error {
  constructor(status, body) {
    super((body && body.message) || "HTTP " + status);
    this.status = status;
    this.code = body && body.code;
  }
}

export const auth = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  listeners: new Set(),
  set(token) {
    this.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
  // A 401 tells every listener (the token prompt) once per refusal.
  refused() {
    for (const listener of this.listeners) listener();
  },
};

function headers() {
  return auth.token ? { Authorization: "Bearer " + auth.token } : {};
}

export async function request(path, { method = "GET", body = undefined, signal } = {}) {
  const options = { method, headers: headers(), signal };
  if (body !== undefined) {
    options.headers = { ...options.headers, "Content-Type": "application/json" };
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  if (response.status === 401) auth.refused();
  if (!response.ok) {
    let parsed = null;
    try { parsed = await response.json(); } catch { /* not JSON */ }
    throw new HttpError(response.status, parsed);
  }
  return response;
}

export async function getJson(path, options) {
  return (await request(path, options)).json();
}

export function enc(value) {
  return encodeURIComponent(value);
}

// -- the connection indicator's truth --------------------------------------------------------
export const connection = {
  streams: new Set(),
  listeners: new Set(),
  changed() {
    for (const listener of this.listeners) listener(this.state());
  },
  // The worst of the open streams: one reconnecting stream makes the page not live.
  state() {
    let worst = { name: "idle", since: null };
    const rank = { idle: 0, connecting: 1, connected: 2, stopped: 3, reconnecting: 3, stale: 4 };
    const now = Date.now();
    for (const stream of this.streams) {
      let name = stream.status;
      if (name === "connected" && now - stream.lastSeen > STALE_AFTER_MS) name = "stale";
      if (name === "reconnecting" && stream.lastGood && now - stream.failedAt > 5000) name = "stale";
      if (rank[name] > rank[worst.name] || worst.name === "idle") {
        worst = { name, since: stream.lastGood, error: stream.error, attempt: stream.attempt };
      }
    }
    return worst;
  },
};
setInterval(() => connection.changed(), 1000);

// One server-sent event stream, reconnecting with backoff; ``url()`` is asked anew each time
// so the stream resumes from the newest cursor.
export class Stream {
  constructor(url, onEvent) {
    this.url = url;
    this.onEvent = onEvent;
    this.status = "connecting";
    this.lastSeen = Date.now();
    this.lastGood = null;
    this.failedAt = null;
    this.attempt = 0;
    this.error = null;
    this.controller = new AbortController();
    connection.streams.add(this);
    connection.changed();
    this.run();
  }

  close() {
    this.controller.abort();
    connection.streams.delete(this);
    connection.changed();
  }

  seen() {
    this.lastSeen = Date.now();
    this.lastGood = this.lastSeen;
    this.failedAt = null;
    if (this.status !== "connected") {
      this.status = "connected";
      this.attempt = 0;
      this.error = null;
      connection.changed();
    }
  }

  async run() {
    let delay = 250;
    const signal = this.controller.signal;
    while (!signal.aborted) {
      try {
        const response = await request(this.url(), { signal });
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) throw new Error("the server closed the stream");
          this.seen();
          delay = 250;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let name = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) name = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
            }
            if (data && (await this.onEvent(name, JSON.parse(data))) === "restart") {
              reader.cancel().catch(() => {});
              throw new RestartError();
            }
          }
        }
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof RestartError) continue;
        if (error instanceof HttpError && (error.status === 404 || error.status === 401)) {
          this.status = "stopped";
          this.error = error.message;
          connection.changed();
          return;
        }
        this.status = "reconnecting";
        this.error = error.message;
        this.attempt += 1;
        if (this.failedAt === null || this.attempt === 1) this.failedAt = Date.now();
        connection.changed();
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }
}

class RestartError extends Error {}
