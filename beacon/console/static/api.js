// The console server's JSON API, same origin: GETs, and POSTs with JSON
// bodies (the browser adds the Origin header the server checks).

export class APIError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function answer(response) {
  let body = null;
  const type = response.headers.get("Content-Type") || "";
  if (type.startsWith("application/json")) {
    try {
      body = await response.json();
    } catch {
      body = null;
    }
  }
  if (response.ok) {
    return body;
  }
  if (response.status === 401) {
    throw new APIError(
      "This session has ended. Run `beacon review web` for a new link.", 401, null);
  }
  const error = body && typeof body === "object" ? body.error : null;
  const message = error && typeof error.message === "string"
    ? error.message
    : `the console answered ${response.status} ${response.statusText}`;
  throw new APIError(message, response.status, error ? error.code : null);
}

async function call(path, init) {
  let response;
  try {
    response = await fetch(path, { credentials: "same-origin", cache: "no-store", ...init });
  } catch {
    throw new APIError("The console is not answering (was `beacon review web` stopped?)", 0, null);
  }
  return answer(response);
}

export function get(path, params) {
  const query = params ? new URLSearchParams(params).toString() : "";
  return call(query ? `${path}?${query}` : path, { method: "GET" });
}

export function post(path, body) {
  return call(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

export function taskPath(id) {
  return `/api/tasks/${encodeURIComponent(id)}`;
}
