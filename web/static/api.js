// HTTP to the JSON API, and what its errors mean in plain language.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The server could not be reached at all (fetch itself failed). */
export class Unreachable extends Error {}

const auth = { token: null, onUnauthorized: () => {} };

export function setToken(token) {
  auth.token = token;
}

export function token() {
  return auth.token;
}

export function onUnauthorized(callback) {
  auth.onUnauthorized = callback;
}

export async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${auth.token}`, Accept: "application/json" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new Unreachable("the server cannot be reached");
  }
  let data = null;
  if (response.status !== 204) {
    try {
      data = await response.json();
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const error = new ApiError(
      response.status,
      data?.error?.code ?? "http_error",
      data?.error?.message ?? `${response.status} ${response.statusText}`,
    );
    if (response.status === 401) auth.onUnauthorized(error);
    throw error;
  }
  return data;
}

/** Whether the server has a route for POST `path` (a 405 to a GET says it does; a 404 that it does not). */
export async function hasPostRoute(path) {
  try {
    const headers = { Authorization: `Bearer ${auth.token}` };
    const response = await fetch(path, { method: "GET", headers, cache: "no-store" });
    return response.status === 405;
  } catch {
    return false;
  }
}

const PLAIN = {
  approval_pending: "A decision is pending: approve or reject the request above before sending a new message.",
  run_active: "The assistant is still replying. Wait for it to finish, or press Stop.",
  no_active_run: "There is nothing to stop: the reply has already finished.",
  nothing_to_regenerate: "There is no reply to regenerate yet.",
  already_decided: "Someone already decided on this request.",
  rate_limited: "You're going a little fast. Wait a moment, then try again.",
  payload_too_large: "That is too long to send.",
  database_unavailable: "The server can't reach its database right now. Try again in a moment.",
};

/** A sentence a person can act on, for any error the page meets. */
export function plainError(error) {
  if (error instanceof Unreachable) return "Can't reach the server. Check your connection; the page keeps trying.";
  if (error instanceof ApiError) {
    if (PLAIN[error.code]) return PLAIN[error.code];
    if (error.status === 404) return "That conversation doesn't exist, or it was deleted.";
    if (error.status === 401) return "You are signed out: the sign-in link or token was not accepted, or it expired.";
    if (error.status === 429) return PLAIN.rate_limited;
    if (error.status === 422) return `That was not accepted: ${error.message}`;
    if (error.status >= 500) return "The server had a problem. Try again in a moment.";
    return error.message;
  }
  return "Something went wrong in the page. Reload it to continue.";
}
