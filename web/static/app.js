// durable-chat's browser page: threads on the left, the selected conversation on the right.
//
// No build step, no framework. Deliberate choices:
// - The token arrives in the URL fragment (`#token=…`), which never reaches server logs; it is kept
//   in sessionStorage and removed from the address bar at once.
// - The event stream is read with fetch + a ReadableStream and parsed here, because EventSource
//   cannot send an Authorization header.
// - Events are applied idempotently by id (ids at or below the last seen one are ignored), so a
//   reconnect that resumes with `after=<last id>` never loses or doubles text.
// - Everything user- or model-provided goes through textContent, never innerHTML.

const TOKEN_KEY = "durable-chat.token";
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

const $ = (selector) => document.querySelector(selector);
const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);

const state = {
  token: null,
  threadId: null,
  lastEventId: 0,
  nextCursor: null,
  /** Bumped on every thread switch so a stale stream loop stops. */
  generation: 0,
  abort: null,
  parts: new Map(), // part_id → assistant text element
  toolCalls: new Set(), // tool_call_ids already shown as calls
  toolResults: new Set(), // tool_call_ids already shown as results
  cards: new Map(), // tool_call_id → approval card element
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// ---------------------------------------------------------------- sign-in

function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    params.delete("token");
    writeFragment(params);
  }
  return params.get("thread");
}

function writeFragment(params) {
  const hash = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (hash ? `#${hash}` : ""));
}

function showSignIn(message) {
  state.token = null;
  stopStream();
  sessionStorage.removeItem(TOKEN_KEY);
  $("#app").hidden = true;
  $("#sign-out").hidden = true;
  $("#signin").hidden = false;
  const error = byTestId("token-error");
  error.textContent = message ?? "";
  error.hidden = !message;
  byTestId("token-input").focus();
}

async function signIn(token, threadId) {
  state.token = token;
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = false;
  try {
    await loadThreads();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
    showInline(byTestId("threads-error"), error);
  }
  if (threadId) await selectThread(threadId);
}

// ---------------------------------------------------------------- HTTP

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  if (response.status !== 204) {
    try {
      data = await response.json();
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const code = data?.error?.code ?? "http_error";
    const message = data?.error?.message ?? `${response.status} ${response.statusText}`;
    if (response.status === 401) showSignIn(`Signed out: ${message}`);
    throw new ApiError(response.status, code, message);
  }
  return data;
}

function showInline(element, error) {
  element.textContent = error instanceof ApiError && error.code ? `${error.message} (${error.code})` : String(error.message ?? error);
  element.hidden = false;
}

function hideInline(element) {
  element.textContent = "";
  element.hidden = true;
}

// ---------------------------------------------------------------- threads

async function loadThreads(cursor) {
  const query = cursor ? `?cursor=${encodeURIComponent(cursor)}` : "";
  const data = await api("GET", `/api/threads${query}`);
  const list = byTestId("thread-list");
  if (!cursor) list.replaceChildren();
  for (const thread of data.threads ?? []) {
    list.append(threadItem(thread));
    // A new thread gets its title from its first message: show it once the server has it.
    if (thread.thread_id === state.threadId && thread.title) byTestId("thread-title").textContent = thread.title;
  }
  state.nextCursor = data.next_cursor ?? null;
  byTestId("more-threads").hidden = !state.nextCursor;
  hideInline(byTestId("threads-error"));
  markSelected();
}

function threadItem(thread) {
  const li = document.createElement("li");
  const button = document.createElement("button");
  button.type = "button";
  button.className = "thread-item";
  button.dataset.testid = "thread-item";
  button.dataset.threadId = thread.thread_id;
  const title = document.createElement("span");
  title.className = "thread-name";
  title.textContent = thread.title || "New chat";
  const meta = document.createElement("span");
  meta.className = `thread-meta status-${thread.status}`;
  meta.textContent = `${statusLabel(thread.status)} · ${formatTime(thread.updated_at)}`;
  button.append(title, meta);
  button.addEventListener("click", () => selectThread(thread.thread_id));
  li.append(button);
  return li;
}

function markSelected() {
  for (const button of document.querySelectorAll("[data-testid=thread-item]")) {
    if (button.dataset.threadId === state.threadId) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
}

async function newThread() {
  const button = byTestId("new-thread");
  button.disabled = true;
  try {
    const thread = await api("POST", "/api/threads", {});
    byTestId("thread-list").prepend(threadItem(thread));
    await selectThread(thread.thread_id);
    byTestId("message-input").focus();
  } catch (error) {
    showInline(byTestId("threads-error"), error);
  } finally {
    button.disabled = false;
  }
}

async function selectThread(threadId) {
  stopStream();
  const generation = ++state.generation;
  state.threadId = threadId;
  state.lastEventId = 0;
  state.parts.clear();
  state.toolCalls.clear();
  state.toolResults.clear();
  state.cards.clear();
  markSelected();
  const params = new URLSearchParams(location.hash.slice(1));
  params.set("thread", threadId);
  writeFragment(params);

  const transcript = byTestId("transcript");
  transcript.replaceChildren();
  hideInline(byTestId("send-error"));
  let thread;
  try {
    thread = await api("GET", `/api/threads/${encodeURIComponent(threadId)}`);
  } catch (error) {
    if (generation !== state.generation) return;
    if (error instanceof ApiError && error.status === 404) {
      state.threadId = null;
      writeFragment(new URLSearchParams());
      showConversation(false);
    }
    if (!(error instanceof ApiError && error.status === 401)) showInline(byTestId("threads-error"), error);
    return;
  }
  if (generation !== state.generation) return;
  showConversation(true);
  byTestId("thread-title").textContent = thread.title || "New chat";
  for (const message of thread.messages ?? []) renderStoredMessage(message);
  for (const pending of thread.pending_approvals ?? []) renderApprovalCard(pending);
  for (const pending of thread.pending_approvals ?? []) {
    if (pending.decision) markDecided(pending.tool_call_id, pending.decision, pending.reason);
  }
  setRunStatus(thread.status === "running" ? "running" : thread.status, null);
  // Follow from the newest event the stored messages reflect: later ones are replayed.
  state.lastEventId = Number(thread.messages_event_id ?? thread.last_event_id ?? 0) || 0;
  scrollToEnd(true);
  followEvents(threadId, generation);
}

function showConversation(visible) {
  byTestId("no-thread").hidden = visible;
  byTestId("thread-title").hidden = !visible;
  byTestId("transcript").hidden = !visible;
  byTestId("composer").hidden = !visible;
}

// ---------------------------------------------------------------- stored messages

function renderStoredMessage(message) {
  for (const part of message.parts ?? []) {
    switch (part.part_kind) {
      case "user-prompt":
        renderUserMessage(userPromptText(part.content));
        break;
      case "text":
        renderText(null, part.content ?? "");
        break;
      case "tool-call":
        renderToolCall(part.tool_call_id, part.tool_name, parseArgs(part.args));
        break;
      case "tool-return":
        renderToolResult(part.tool_call_id, part.tool_name, part.outcome ?? "success", part.content);
        break;
      default:
        // System prompts, retry prompts and thinking are not part of what the user sees.
        break;
    }
  }
}

function userPromptText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((item) => (typeof item === "string" ? item : "[attachment]")).join("\n");
  return String(content ?? "");
}

function parseArgs(args) {
  if (typeof args !== "string") return args ?? {};
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

// ---------------------------------------------------------------- the event stream

function stopStream() {
  state.generation++;
  if (state.abort) state.abort.abort();
  state.abort = null;
  setConnection("");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function followEvents(threadId, generation) {
  let delay = RETRY_MIN_MS;
  while (generation === state.generation) {
    const controller = new AbortController();
    state.abort = controller;
    try {
      const response = await fetch(
        `/api/threads/${encodeURIComponent(threadId)}/events?after=${state.lastEventId}`,
        {
          headers: { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" },
          cache: "no-store",
          signal: controller.signal,
        },
      );
      if (response.status === 401) {
        showSignIn("Signed out: the token was not accepted.");
        return;
      }
      if (response.status === 404) return;
      if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
      setConnection("live");
      const before = state.lastEventId;
      await readEventStream(response.body, (frame) => {
        if (generation === state.generation) applyFrame(frame);
      });
      if (state.lastEventId > before) delay = RETRY_MIN_MS;
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (generation !== state.generation) return;
    setConnection("reconnecting");
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

function applyFrame(frame) {
  const eventId = Number(frame.id);
  if (!Number.isFinite(eventId) || eventId <= state.lastEventId) return;
  let data;
  try {
    data = JSON.parse(frame.data);
  } catch {
    return;
  }
  state.lastEventId = eventId;
  applyEvent(frame.event, data);
}

function applyEvent(type, data) {
  const nearEnd = isNearEnd();
  switch (type) {
    case "run_started":
      setRunStatus("running", null);
      hideInline(byTestId("send-error"));
      break;
    case "user_message":
      renderUserMessage(data.content);
      break;
    case "text_delta":
      appendText(data.part_id, data.delta);
      break;
    case "text_done":
      renderText(data.part_id, data.text).classList.remove("streaming");
      break;
    case "text_withdrawn": {
      const element = renderText(data.part_id, data.replacement);
      element.classList.remove("streaming");
      element.classList.add("withdrawn");
      element.dataset.withdrawn = "true";
      element.title = "The original text was withdrawn by a guardrail.";
      break;
    }
    case "tool_call":
      renderToolCall(data.tool_call_id, data.tool_name, data.args);
      break;
    case "tool_result":
      renderToolResult(data.tool_call_id, data.tool_name, data.outcome, data.content);
      break;
    case "approval_required":
      for (const call of data.approvals ?? []) renderApprovalCard(call);
      break;
    case "approval_decided":
      markDecided(data.tool_call_id, data.decision, data.reason, data.decided_by, data.override_args);
      break;
    case "guardrail_tripped":
      renderNotice("guardrail", `Guardrail “${data.guardrail}” tripped on the ${data.stage}.`);
      break;
    case "run_finished":
      for (const element of state.parts.values()) element.classList.remove("streaming");
      setRunStatus(data.status, data.error ?? null);
      if (data.error) renderNotice("run-error", `The run ${data.status}: ${data.error}`);
      refreshThreads();
      break;
    default:
      break; // A newer server may send event types this page does not know yet.
  }
  if (nearEnd) scrollToEnd(false);
}

async function refreshThreads() {
  try {
    await loadThreads();
  } catch {
    // The list is a convenience; the conversation itself is already up to date.
  }
}

// ---------------------------------------------------------------- rendering

function element(tag, className, testId, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (testId) node.dataset.testid = testId;
  if (text !== undefined) node.textContent = text;
  return node;
}

function transcript() {
  return byTestId("transcript");
}

function renderUserMessage(content) {
  transcript().append(element("div", "msg user", "user-message", content ?? ""));
}

/** The element of text part `partId` (created when new), its text set to `text`. */
function renderText(partId, text) {
  let node = partId ? state.parts.get(partId) : undefined;
  if (!node) {
    node = element("div", "msg assistant", "assistant-text");
    if (partId) {
      node.dataset.partId = partId;
      state.parts.set(partId, node);
    }
    transcript().append(node);
  }
  node.textContent = text ?? "";
  return node;
}

function appendText(partId, delta) {
  const node = state.parts.get(partId) ?? renderText(partId, "");
  node.classList.add("streaming");
  node.append(document.createTextNode(delta ?? ""));
}

function compactJson(value) {
  try {
    return typeof value === "string" ? value : JSON.stringify(value);
  } catch {
    return String(value);
  }
}

function renderToolCall(toolCallId, toolName, args) {
  if (toolCallId && state.toolCalls.has(toolCallId)) return;
  if (toolCallId) state.toolCalls.add(toolCallId);
  const line = element("div", "tool tool-call", "tool-call");
  if (toolCallId) line.dataset.toolCallId = toolCallId;
  line.append(
    element("span", "tool-label", null, "tool call"),
    element("code", "tool-name", "tool-name", toolName),
    element("code", "tool-args", "tool-args", compactJson(args)),
  );
  transcript().append(line);
}

function renderToolResult(toolCallId, toolName, outcome, content) {
  if (toolCallId && state.toolResults.has(toolCallId)) return;
  if (toolCallId) state.toolResults.add(toolCallId);
  const line = element("div", `tool tool-result outcome-${outcome}`, "tool-result");
  if (toolCallId) line.dataset.toolCallId = toolCallId;
  line.dataset.outcome = outcome;
  line.append(
    element("span", "tool-label", null, "result"),
    element("code", "tool-name", "tool-name", toolName),
    element("span", "badge", "tool-outcome", outcome),
    element("code", "tool-content", "tool-content", compactJson(content)),
  );
  transcript().append(line);
}

function renderNotice(testId, text) {
  transcript().append(element("div", `notice ${testId}`, testId, text));
}

// ---------------------------------------------------------------- approvals

function renderApprovalCard(call) {
  if (!call?.tool_call_id || state.cards.has(call.tool_call_id)) return;
  const toolCallId = call.tool_call_id;
  const args = parseArgs(call.args);
  const card = element("section", "approval-card", "approval-card");
  card.dataset.toolCallId = toolCallId;
  card.setAttribute("aria-label", `Approval needed for ${call.tool_name}`);

  const heading = element("h3", null, null);
  heading.append("Approve ", element("code", null, "tool-name", call.tool_name), "?");
  const argsView = element("pre", "args", "approval-args", JSON.stringify(args, null, 2));

  const actions = element("div", "actions", "approval-actions");
  const approve = button("Approve", "primary", "approve");
  const edit = button("Edit", null, "edit");
  const reject = button("Reject", "danger", "reject");
  actions.append(approve, edit, reject);

  const editor = element("div", "editor", "editor");
  editor.hidden = true;
  const editorId = `args-${toolCallId}`;
  const editorLabel = element("label", null, null, "Arguments (JSON)");
  editorLabel.htmlFor = editorId;
  const textarea = element("textarea", null, "args-editor");
  textarea.id = editorId;
  textarea.rows = 6;
  textarea.spellcheck = false;
  textarea.value = JSON.stringify(args, null, 2);
  const save = button("Save & approve", "primary", "save-approve");
  const cancelEdit = button("Cancel", null, "cancel-edit");
  editor.append(editorLabel, textarea, row(save, cancelEdit));

  const rejecter = element("div", "rejecter", "rejecter");
  rejecter.hidden = true;
  const reasonId = `reason-${toolCallId}`;
  const reasonLabel = element("label", null, null, "Reason (optional)");
  reasonLabel.htmlFor = reasonId;
  const reason = element("input", null, "reason-input");
  reason.id = reasonId;
  reason.type = "text";
  reason.placeholder = "Why reject this call?";
  const confirmReject = button("Reject call", "danger", "confirm-reject");
  const cancelReject = button("Cancel", null, "cancel-reject");
  rejecter.append(reasonLabel, reason, row(confirmReject, cancelReject));

  const error = element("p", "error", "approval-error");
  error.setAttribute("role", "alert");
  error.hidden = true;
  const decision = element("p", "decision", "approval-decision");
  decision.hidden = true;

  card.append(heading, argsView, actions, editor, rejecter, error, decision);
  transcript().append(card);
  state.cards.set(toolCallId, card);

  const decide = async (path, body, busy) => {
    hideInline(error);
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    busy.setAttribute("aria-busy", "true");
    try {
      const result = await api(
        "POST",
        `/api/threads/${encodeURIComponent(state.threadId)}/tool-calls/${encodeURIComponent(toolCallId)}/${path}`,
        body,
      );
      markDecided(toolCallId, result.decision, body.reason, null, body.override_args);
    } catch (err) {
      showInline(error, err);
    } finally {
      busy.removeAttribute("aria-busy");
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  };

  approve.addEventListener("click", () => decide("approve", {}, approve));
  edit.addEventListener("click", () => {
    rejecter.hidden = true;
    editor.hidden = false;
    textarea.focus();
  });
  cancelEdit.addEventListener("click", () => {
    editor.hidden = true;
    hideInline(error);
    edit.focus();
  });
  save.addEventListener("click", () => {
    let overrideArgs;
    try {
      overrideArgs = JSON.parse(textarea.value);
    } catch (err) {
      showInline(error, new Error(`Invalid JSON: ${err.message}`));
      return;
    }
    if (overrideArgs === null || typeof overrideArgs !== "object" || Array.isArray(overrideArgs)) {
      showInline(error, new Error("The arguments must be a JSON object."));
      return;
    }
    decide("approve", { override_args: overrideArgs }, save);
  });
  reject.addEventListener("click", () => {
    editor.hidden = true;
    rejecter.hidden = false;
    reason.focus();
  });
  cancelReject.addEventListener("click", () => {
    rejecter.hidden = true;
    reject.focus();
  });
  const sendReject = () => {
    const text = reason.value.trim();
    decide("reject", text ? { reason: text } : {}, confirmReject);
  };
  confirmReject.addEventListener("click", sendReject);
  reason.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      sendReject();
    }
  });
}

function button(label, className, testId) {
  const node = element("button", className, testId, label);
  node.type = "button";
  return node;
}

function row(...children) {
  const node = element("div", "actions");
  node.append(...children);
  return node;
}

function markDecided(toolCallId, decision, reason, decidedBy, overrideArgs) {
  const card = state.cards.get(toolCallId);
  if (!card || !decision) return;
  // The decision's event and the POST's answer race; the event, which names the approver, wins.
  if (card.dataset.decision && !decidedBy) return;
  card.dataset.decision = decision;
  card.classList.add(`decided-${decision}`);
  for (const selector of ["approval-actions", "editor", "rejecter", "approval-error"]) {
    const part = card.querySelector(`[data-testid="${selector}"]`);
    if (part) part.remove();
  }
  const text = [decision === "approved" ? "Approved" : "Rejected"];
  if (decidedBy) text.push(`by ${decidedBy}`);
  if (overrideArgs) text.push(`with edited arguments ${compactJson(overrideArgs)}`);
  if (reason) text.push(`— “${reason}”`);
  const node = card.querySelector('[data-testid="approval-decision"]');
  node.textContent = text.join(" ");
  node.hidden = false;
}

// ---------------------------------------------------------------- sending

async function sendMessage() {
  const input = byTestId("message-input");
  const send = byTestId("send");
  const content = input.value.trim();
  if (!content || !state.threadId || send.disabled) return;
  const error = byTestId("send-error");
  hideInline(error);
  send.disabled = true;
  try {
    await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/messages`, {
      content,
      idempotency_key: crypto.randomUUID(),
    });
    // No status change here: the run's own events (which may beat this answer) set it.
    input.value = "";
  } catch (err) {
    showInline(error, err);
  } finally {
    send.disabled = false;
    input.focus();
  }
}

// ---------------------------------------------------------------- status and scrolling

function statusLabel(status) {
  return (
    {
      idle: "Idle",
      running: "Running…",
      awaiting_approval: "Waiting for approval",
      completed: "Completed",
      blocked: "Blocked by a guardrail",
      failed: "Failed",
      cancelled: "Cancelled",
    }[status] ?? status ?? ""
  );
}

function setRunStatus(status, error) {
  const node = byTestId("run-status");
  node.dataset.status = status ?? "";
  node.textContent = error ? `${statusLabel(status)}: ${error}` : statusLabel(status);
}

function setConnection(mode) {
  const node = byTestId("connection");
  node.dataset.state = mode;
  node.textContent = mode === "live" ? "● live" : mode === "reconnecting" ? "Reconnecting…" : "";
}

function formatTime(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString([], { month: "short", day: "numeric" });
}

function isNearEnd() {
  const node = transcript();
  return node.scrollHeight - node.scrollTop - node.clientHeight < 80;
}

function scrollToEnd(force) {
  const node = transcript();
  if (force || isNearEnd()) node.scrollTop = node.scrollHeight;
}

// ---------------------------------------------------------------- wiring

function main() {
  const threadId = readFragment();
  byTestId("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = byTestId("token-input").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    byTestId("token-input").value = "";
    signIn(token, null);
  });
  $("#sign-out").addEventListener("click", () => showSignIn(null));
  byTestId("new-thread").addEventListener("click", newThread);
  byTestId("more-threads").addEventListener("click", () =>
    loadThreads(state.nextCursor).catch((error) => showInline(byTestId("threads-error"), error)),
  );
  byTestId("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    sendMessage();
  });
  byTestId("message-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendMessage();
    }
  });
  showConversation(false);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) signIn(token, threadId);
  else showSignIn(null);
}

main();
