// A thread's event stream: read with fetch (an EventSource cannot send the bearer token), parsed
// here, and followed again with backoff after `after=<last id>` whenever it breaks.

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follow `threadId`'s events until `signal.active()` turns false.
 *
 * `hooks`: `lastId()` the newest id applied, `onFrame(frame)` per event, `onState("live" |
 * "reconnecting")`, `onUnauthorized()`, `onGone()` (the thread is no more).
 */
export async function follow(threadId, token, hooks, signal) {
  let delay = RETRY_MIN_MS;
  while (signal.active()) {
    const controller = new AbortController();
    signal.abort = () => controller.abort();
    try {
      const response = await fetch(
        `/api/threads/${encodeURIComponent(threadId)}/events?after=${hooks.lastId()}`,
        {
          headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" },
          cache: "no-store",
          signal: controller.signal,
        },
      );
      if (response.status === 401) return hooks.onUnauthorized();
      if (response.status === 404) return hooks.onGone();
      if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
      hooks.onState("live");
      const before = hooks.lastId();
      await readEventStream(response.body, (frame) => {
        if (signal.active()) hooks.onFrame(frame);
      });
      if (hooks.lastId() > before) delay = RETRY_MIN_MS;
    } catch {
      if (controller.signal.aborted) return;
    }
    if (!signal.active()) return;
    hooks.onState("reconnecting");
    await sleep(delay + Math.random() * delay * 0.2);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

/** Parse a `text/event-stream` body (WHATWG format), calling `onFrame({id, event, data})` per event. */
export async function readEventStream(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id = null;
  let event = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(buffer);
      if (!match) break;
      // A CR at the very end may be the first half of a CRLF still in flight.
      if (match[0] === "\r" && match.index === buffer.length - 1) break;
      const line = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      if (line === "") {
        if (data.length > 0) onFrame({ id, event: event || "message", data: data.join("\n") });
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let fieldValue = colon < 0 ? "" : line.slice(colon + 1);
      if (fieldValue.startsWith(" ")) fieldValue = fieldValue.slice(1);
      if (field === "id" && !fieldValue.includes("\0")) id = fieldValue;
      else if (field === "event") event = fieldValue;
      else if (field === "data") data.push(fieldValue);
    }
  }
}
