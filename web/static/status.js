// The page's small status surfaces: the notice bar, the run status label, the connection badge,
// inline hints, and whether the transcript is scrolled to its end. They read and write only the
// DOM nodes they are given or name; app.js decides when.

import { byTestId } from "./dom.js";

/** A visible, plain-language notice ("error" or "info"), replacing the previous one. */
export function notify(text, kind = "error") {
  const bar = byTestId("notice");
  byTestId("notice-text").textContent = text;
  bar.dataset.kind = kind;
  bar.hidden = false;
}

/** Hide the notice; with a kind, only a notice of that kind. */
export function clearNotice(kind) {
  const bar = byTestId("notice");
  if (!kind || bar.dataset.kind === kind) bar.hidden = true;
}

export function statusLabel(status) {
  return (
    {
      idle: "Idle",
      queued: "Starting…",
      running: "Replying…",
      awaiting_approval: "Waiting for approval",
      completed: "Completed",
      blocked: "Blocked by a guardrail",
      failed: "Failed",
      cancelled: "Stopped",
    }[status] ?? status ?? ""
  );
}

/** The event stream's state in the header: "live", "reconnecting", or nothing. */
export function setConnection(mode) {
  const node = byTestId("connection");
  node.dataset.state = mode;
  node.textContent = mode === "live" ? "● live" : mode === "reconnecting" ? "Reconnecting…" : "";
}

export function showInline(node, text) {
  node.textContent = text;
  node.hidden = false;
}

export function hideInline(node) {
  node.textContent = "";
  node.hidden = true;
}

/** Whether the user is at (or within 80 px of) the end of a scrolled node. */
export function isNearEnd(node) {
  return node.scrollHeight - node.scrollTop - node.clientHeight < 80;
}

export function scrollToEnd(node) {
  node.scrollTop = node.scrollHeight;
  byTestId("jump-to-latest").hidden = true;
}
