// durable-chat's browser page: threads on the left (a slide-out on phones), the conversation on
// the right. No build step, no framework; see docs/web.md ("The page") for its behaviour.
//
// Deliberate choices:
// - The token arrives in the URL fragment (`#token=…`), which never reaches server logs; it is
//   kept in localStorage (every tab of the browser stays signed in until "Sign out") and removed
//   from the address bar at once. A sign-in link pasted into an open tab signs it in too.
// - Events are applied idempotently by id (ids at or below the last seen one are ignored), so a
//   reconnect that resumes with `after=<last id>` never loses or doubles anything.
// - What the page shows after a run stops, or after a reload, is what the server stored: a
//   cancelled run is rendered again from the thread as stored.
// - Everything user- or model-provided goes in as text, except replies: markdown, sanitised.

import { ApiError, api, hasPostRoute, onUnauthorized, plainError, setToken } from "./api.js";
import { Approvals } from "./approvals.js";
import { closeDrawer, wireDrawer } from "./drawer.js";
import { button, byTestId, copyText, titleFrom } from "./dom.js";
import { follow } from "./events.js";
import { clearPending, eventAttachments, pendingFiles, wireAttachments } from "./files.js";
import { hideRecords, wireHeader } from "./header.js";
import { TOKEN_KEY, readFragment, userOf, writeFragment } from "./session.js";
import { fillStarters } from "./starters.js";
import { listItem, markSelected, threadItem } from "./threadlist.js";
import { clearNotice, hideInline, isNearEnd, notify, scrollToEnd, setConnection, showInline, statusLabel } from "./status.js";
import { lastRunId, parseArgs, Transcript } from "./transcript.js";


const state = {
  token: null,
  user: null,
  threadId: null,
  title: "",
  status: "idle",
  runId: null,
  lastEventId: 0,
  nextCursor: null,
  generation: 0,
  stream: null,
  pinned: true,
  unreachable: 0,
  app: null,
  canRegenerate: false,
  finished: new Set(), // runs whose end this page has seen
};

const $ = (selector) => document.querySelector(selector);
const transcriptNode = () => byTestId("transcript");

const transcript = new Transcript(transcriptNode(), {
  // After a reload, a call's delegated agent is read when its step is opened (none: null).
  loadDelegation: (toolCallId) =>
    api("GET", `/api/threads/${encodeURIComponent(state.threadId)}/tool-calls/${encodeURIComponent(toolCallId)}/messages`)
      .then((answer) => answer.messages ?? null)
      .catch(() => null),
});
const approvals = new Approvals({
  threadId: () => state.threadId,
  user: () => state.user,
  placeAfter: (toolCallId, call) => transcript.anchorOf(toolCallId, call?.path?.length > 1),
  append: (card) => transcriptNode().append(card),
  onDecided: (toolCallId, overrideArgs) => {
    if (overrideArgs) transcript.markEdited(toolCallId, overrideArgs);
    updateComposer();
  },
});

// ---------------------------------------------------------------- sign-in

function showSignIn(message, { forget = true } = {}) {
  state.token = null;
  stopStream();
  if (forget) localStorage.removeItem(TOKEN_KEY);
  $("#app").hidden = true;
  $("#sign-out").hidden = true;
  byTestId("signed-in-as").hidden = true;
  byTestId("open-threads").hidden = true;
  $("#signin").hidden = false;
  const error = byTestId("token-error");
  error.textContent = message ?? "";
  error.hidden = !message;
  byTestId("token-input").focus();
}

async function signIn(token, threadId) {
  localStorage.setItem(TOKEN_KEY, token);
  state.token = token;
  state.user = userOf(token);
  setToken(token);
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = false;
  byTestId("open-threads").hidden = false;
  const who = byTestId("signed-in-as");
  who.textContent = state.user ? `Signed in as ${state.user}` : "";
  who.hidden = !state.user;
  const generation = state.generation;
  try {
    await loadThreads();
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) notify(plainError(error));
    if (error instanceof ApiError && error.status === 401) return;
  }
  loadAppInfo();
  // A thread opened while the list loaded (a thread link, a click) stays open.
  if (generation !== state.generation) return;
  if (threadId) await selectThread(threadId);
  else showConversation(false);
}

async function loadAppInfo() {
  try {
    state.app = await api("GET", "/api/app");
  } catch {
    state.app = null; // a server without the app endpoint: no starter prompts
  }
  if (state.app?.name) byTestId("brand").textContent = state.app.name;
  state.canRegenerate = await hasPostRoute("/api/threads/-/regenerate");
  renderStarters();
  updateComposer();
}

onUnauthorized(() => showSignIn("You are signed out: the sign-in link or token was not accepted, or it expired."));

// ---------------------------------------------------------------- threads

async function loadThreads(cursor) {
  const query = cursor ? `?cursor=${encodeURIComponent(cursor)}` : "";
  const data = await api("GET", `/api/threads${query}`);
  const list = byTestId("thread-list");
  if (!cursor) list.replaceChildren();
  for (const thread of data.threads ?? []) {
    list.append(threadItem(thread, openThread));
    if (thread.thread_id === state.threadId && thread.title) setTitle(thread.title);
  }
  state.nextCursor = data.next_cursor ?? null;
  byTestId("more-threads").hidden = !state.nextCursor;
  markSelected(state.threadId);
}

function openThread(threadId) {
  closeDrawer();
  selectThread(threadId);
}

async function newThread() {
  const create = byTestId("new-thread");
  create.disabled = true;
  try {
    const thread = await api("POST", "/api/threads", {});
    byTestId("thread-list").prepend(threadItem(thread, openThread));
    closeDrawer();
    await selectThread(thread.thread_id);
    byTestId("message-input").focus();
    return thread.thread_id;
  } catch (error) {
    notify(plainError(error));
    return null;
  } finally {
    create.disabled = false;
  }
}

function setTitle(title) {
  state.title = title;
  byTestId("thread-title").textContent = title || "New chat";
  const item = listItem(state.threadId ?? "");
  if (item) item.querySelector(".thread-name").textContent = title || "New chat";
}

async function selectThread(threadId) {
  if (threadId !== state.threadId) clearPending();
  stopStream();
  const generation = state.generation;
  state.threadId = threadId;
  state.lastEventId = 0;
  state.runId = null;
  transcript.clear();
  approvals.clear();
  markSelected(state.threadId);
  hideRecords();
  const params = new URLSearchParams(location.hash.slice(1));
  params.set("thread", threadId);
  writeFragment(params);
  hideInline(byTestId("send-error"));
  let thread;
  try {
    thread = await api("GET", `/api/threads/${encodeURIComponent(threadId)}`);
  } catch (error) {
    if (generation !== state.generation) return;
    if (error instanceof ApiError && error.status === 401) return;
    if (error instanceof ApiError && error.status === 404) {
      state.threadId = null;
      writeFragment(new URLSearchParams());
      showConversation(false);
    }
    notify(plainError(error));
    return;
  }
  if (generation !== state.generation) return;
  clearNotice();
  showConversation(true);
  setTitle(thread.title);
  const trail = thread.approvals ?? thread.pending_approvals ?? [];
  const edited = new Map(trail.filter((a) => a.status === "approved" && a.override_args).map((a) => [a.tool_call_id, a.override_args]));
  transcript.renderStored(thread.messages ?? [], edited);
  for (const output of thread.outputs ?? []) transcript.output(output.run_id, output.output, output.output_type, output.tool_call_id);
  for (const approval of trail) {
    approvals.card({ ...approval, args: parseArgs(approval.args) });
    if (approval.status === "pending") transcript.waiting(approval.tool_call_id);
  }
  transcript.loadPending(trail);
  state.runId = lastRunId(thread.messages ?? []);
  const messages = thread.messages ?? [];
  const stopped = messages.length > 0 && messages[messages.length - 1].state === "interrupted";
  setStatus(thread.status === "idle" && stopped ? "cancelled" : thread.status);
  state.lastEventId = Number(thread.messages_event_id ?? thread.last_event_id ?? 0) || 0;
  state.pinned = true;
  renderStarters();
  scrollToEnd(transcriptNode());
  revealPendingCard();
  followEvents(threadId, generation);
}

function showConversation(visible) {
  byTestId("no-thread").hidden = visible;
  byTestId("thread-header").hidden = !visible;
  transcriptNode().hidden = !visible;
  byTestId("composer").hidden = !visible;
  if (!visible) {
    hideRecords();
    byTestId("starter-prompts").hidden = true;
    byTestId("jump-to-latest").hidden = true;
  }
  renderStarters();
}

// ---------------------------------------------------------------- the event stream

function stopStream() {
  state.generation++;
  state.stream?.abort?.();
  state.stream = null;
  setConnection("");
}

function followEvents(threadId, generation) {
  const signal = { active: () => generation === state.generation, abort: null };
  state.stream = signal;
  follow(
    threadId,
    state.token,
    {
      lastId: () => state.lastEventId,
      onFrame: applyFrame,
      onState: (mode) => {
        setConnection(mode);
        if (mode === "live") {
          state.unreachable = 0;
          clearNotice("connection");
        } else if (++state.unreachable >= 2) {
          notify("Can't reach the server. Check your connection; the page keeps trying.", "connection");
        }
      },
      onUnauthorized: () => showSignIn("You are signed out: the sign-in token was not accepted, or it expired."),
      onGone: () => {
        if (!signal.active()) return;
        notify("This conversation was deleted.");
        leaveThread();
      },
    },
    signal,
  );
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
  // Who produced it: the agent, and inside a delegated run, the call it runs in.
  const who = { agent: data.agent ?? null, parent: data.parent_tool_call_id ?? null };
  switch (type) {
    case "run_started":
      if (data.kind === "regenerate") {
        transcript.trimAfterLastUser();
        approvals.prune();
      }
      state.runId = data.run_id;
      setStatus("running");
      hideInline(byTestId("send-error"));
      break;
    case "user_message":
      // The event names the message's files, whichever page or client sent them.
      transcript.userMessage(data.content, undefined, eventAttachments(state.threadId, data.attachments));
      break;
    case "text_delta":
      transcript.appendText(data.part_id, data.delta, data.run_id, who);
      break;
    case "text_done":
      transcript.text(data.part_id, data.text, data.run_id, undefined, who);
      break;
    case "text_withdrawn":
      transcript.withdrawn(data.part_id, data.replacement, data.run_id, who);
      break;
    case "tool_call":
      transcript.toolCall(data.tool_call_id, data.tool_name, data.args, data.run_id, who);
      break;
    case "tool_result":
      transcript.toolResult(data.tool_call_id, data.tool_name, data.outcome, data.content, who);
      break;
    case "agent_changed":
      transcript.agentChanged(data.agent);
      break;
    case "approval_required":
      for (const call of data.approvals ?? []) {
        approvals.card(call);
        transcript.waiting(call.tool_call_id);
      }
      revealPendingCard();
      addReviewContext(state.threadId, state.generation);
      break;
    case "approval_decided":
      approvals.decided(data.tool_call_id, { ...data, decided_at: data.decided_at ?? new Date().toISOString() });
      break;
    case "tool_outcome_unknown":
      transcript.notice("outcome-unknown", `The outcome of ${data.tool_name} is unknown: the process running it stopped. A person decides whether it runs again.`);
      break;
    case "guardrail_tripped":
      transcript.notice("guardrail", `Guardrail “${data.guardrail}” tripped on the ${data.stage}.`);
      break;
    case "run_finished":
      state.finished.add(data.run_id);
      transcript.finish();
      if (data.status === "cancelled") {
        // Show what the server kept of the stopped run: the same as a reload would.
        selectThread(state.threadId);
        refreshThreads();
        return;
      }
      setStatus(data.status, data.error ?? null);
      if (data.output_type) transcript.output(data.run_id, data.output, data.output_type, data.output_tool_call_id);
      if (data.error) transcript.notice("run-error", `The run ${data.status}: ${data.error}`);
      refreshThreads();
      break;
    default:
      break; // A newer server may send event types this page does not know yet.
  }
  if (state.pinned) scrollToEnd(transcriptNode());
  else byTestId("jump-to-latest").hidden = false;
  renderStarters();
}

/** The event names the calls; the thread's approvals also carry the app's facts for the reviewer. */
async function addReviewContext(threadId, generation) {
  try {
    const thread = await api("GET", `/api/threads/${encodeURIComponent(threadId)}`);
    if (generation !== state.generation) return;
    approvals.addContexts(thread.approvals ?? thread.pending_approvals ?? []);
  } catch {
    // The card works without them.
  }
}

async function refreshThreads() {
  try {
    await loadThreads();
  } catch {
    // The list is a convenience; the conversation itself is already up to date.
  }
}

function leaveThread() {
  clearPending();
  stopStream();
  state.threadId = null;
  transcript.clear();
  approvals.clear();
  writeFragment(new URLSearchParams());
  showConversation(false);
  markSelected(state.threadId);
}

// ---------------------------------------------------------------- the composer

async function sendMessage(text) {
  const input = byTestId("message-input");
  const content = (text ?? input.value).trim();
  const files = pendingFiles();
  if ((!content && !files.length) || !state.threadId) return; // a photo alone is a message
  const blocked = blockedReason();
  if (blocked) {
    const hint = byTestId("composer-hint");
    hint.classList.remove("attention");
    void hint.offsetWidth; // restart the highlight
    hint.classList.add("attention");
    return;
  }
  const send = byTestId("send");
  hideInline(byTestId("send-error"));
  send.disabled = true;
  if (!state.title && content) setTitle(titleFrom(content)); // named at once, as the server names it
  try {
    const answer = await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/messages`, {
      content,
      idempotency_key: crypto.randomUUID(),
      files: files.map((file) => file.file_id),
    });
    if (text === undefined) input.value = "";
    clearPending();
    byTestId("starter-prompts").hidden = true;
    // The run's own events may have beaten this answer, to its very end.
    if (!state.finished.has(answer.run_id)) {
      state.runId = answer.run_id;
      setStatus("running");
    }
    refreshThreads();
  } catch (error) {
    showInline(byTestId("send-error"), plainError(error));
  } finally {
    send.disabled = false;
    updateComposer();
    input.focus();
  }
}

async function stopRun() {
  const stop = byTestId("stop");
  stop.disabled = true;
  try {
    await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/cancel`);
    await selectThread(state.threadId);
  } catch (error) {
    if (error instanceof ApiError && error.code === "no_active_run") await selectThread(state.threadId);
    else notify(plainError(error));
  } finally {
    stop.disabled = false;
  }
}

async function regenerate(control) {
  control.disabled = true;
  try {
    const answer = await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/regenerate`);
    if (!state.finished.has(answer.run_id)) {
      state.runId = answer.run_id;
      setStatus("running");
    }
  } catch (error) {
    notify(plainError(error));
    control.disabled = false;
  }
}

/** Why the composer cannot send now, in words; null when it can. */
function blockedReason() {
  if (state.status === "running" || state.status === "queued") {
    return "The assistant is replying. Wait for it to finish, or press Stop.";
  }
  if (approvals.pendingCount() > 0) {
    // A call for a reviewer with a role is not this user's to decide: say who it waits for.
    const reviewers = approvals.waitingForReviewers();
    if (reviewers) return `Waiting for a reviewer (${reviewers}) to decide the request above; the reply goes on once they have.`;
    return "A decision is pending: approve or reject the request above before sending a new message.";
  }
  return null;
}

function updateComposer() {
  const running = state.status === "running" || state.status === "queued";
  byTestId("send").hidden = running;
  byTestId("stop").hidden = !running;
  const reason = blockedReason();
  byTestId("send").disabled = Boolean(reason);
  const hint = byTestId("composer-hint");
  hint.textContent = reason ?? "";
  hint.hidden = !reason;
  const runId = byTestId("run-id");
  runId.hidden = !state.runId;
  if (state.runId) {
    runId.textContent = `run ${state.runId.slice(0, 8)}`;
    runId.title = `Copy “durable-chat trace ${state.runId}”`;
    runId.dataset.runId = state.runId;
  }
  for (const old of document.querySelectorAll('[data-testid="regenerate"]')) old.remove();
  const last = transcript.lastAssistantTurn();
  if (state.canRegenerate && last && !reason && state.status !== "awaiting_approval") {
    const control = button("Regenerate", "link", "regenerate");
    control.setAttribute("aria-label", "Regenerate the last reply");
    control.addEventListener("click", () => regenerate(control));
    last.querySelector(".msg-meta").append(control);
  }
}

function renderStarters() {
  const prompts = state.app?.starter_prompts ?? [];
  const home = byTestId("home-starters");
  const inThread = byTestId("starter-prompts");
  const empty = state.threadId && !transcriptNode().childElementCount && state.status === "idle";
  fillStarters(home, prompts, async (prompt) => {
    const threadId = await newThread();
    if (threadId) await sendMessage(prompt);
  });
  home.hidden = !prompts.length;
  fillStarters(inThread, prompts, (prompt) => sendMessage(prompt));
  inThread.hidden = !prompts.length || !empty;
}

// ---------------------------------------------------------------- status and the pending card

function setStatus(status, error) {
  state.status = status === "completed" || status === "blocked" || status === "cancelled" ? "idle" : status;
  const node = byTestId("run-status");
  node.dataset.status = status ?? "";
  node.textContent = error ? `${statusLabel(status)}: ${error}` : statusLabel(status);
  updateComposer();
}

/** A card waiting for a decision is never left out of sight, wherever the user has scrolled. */
function revealPendingCard() {
  const card = approvals.firstPending();
  if (card) card.scrollIntoView({ block: "nearest" });
}

// ---------------------------------------------------------------- wiring

function main() {
  byTestId("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = byTestId("token-input").value.trim();
    if (!token) return;
    byTestId("token-input").value = "";
    signIn(token, null);
  });
  $("#sign-out").addEventListener("click", () => showSignIn(null));
  byTestId("new-thread").addEventListener("click", newThread);
  byTestId("empty-new-thread").addEventListener("click", newThread);
  byTestId("more-threads").addEventListener("click", () => loadThreads(state.nextCursor).catch((error) => notify(plainError(error))));
  byTestId("dismiss-notice").addEventListener("click", () => clearNotice());
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
  byTestId("stop").addEventListener("click", stopRun);
  wireAttachments({ threadId: () => state.threadId, onError: (error) => showInline(byTestId("send-error"), plainError(error)) });
  byTestId("run-id").addEventListener("click", (event) => copyText(`durable-chat trace ${state.runId}`, event.currentTarget));
  wireHeader({
    threadId: () => state.threadId,
    title: () => state.title,
    setTitle,
    notify,
    onDeleted: (threadId) => {
      listItem(threadId)?.closest("li")?.remove();
      leaveThread();
      byTestId("new-thread").focus();
    },
  });
  transcriptNode().addEventListener("scroll", () => {
    state.pinned = isNearEnd(transcriptNode());
    if (state.pinned) byTestId("jump-to-latest").hidden = true;
  });
  byTestId("jump-to-latest").addEventListener("click", () => {
    state.pinned = true;
    scrollToEnd(transcriptNode());
  });
  wireDrawer();
  // Another tab signed in or out: follow it.
  window.addEventListener("storage", (event) => {
    if (event.key !== TOKEN_KEY) return;
    if (event.newValue && event.newValue !== state.token) signIn(event.newValue, state.threadId);
    else if (!event.newValue && state.token) showSignIn("You signed out in another tab.", { forget: false });
  });
  // A sign-in link (or a thread link) pasted into this tab's address bar.
  window.addEventListener("hashchange", () => {
    const { token, threadId } = readFragment();
    if (token) signIn(token, threadId ?? state.threadId);
    else if (threadId && state.token && threadId !== state.threadId) selectThread(threadId);
  });

  const { token, threadId } = readFragment();
  const known = token ?? localStorage.getItem(TOKEN_KEY);
  if (known) signIn(known, threadId);
  else showSignIn(null);
}

main();
