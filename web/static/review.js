// The reviewer's page at /review: the calls the token's roles decide, across users, with their
// deadlines counting down; a decided tab with the decision trail. See docs/review.md ("The review page").
//
// Deliberate choices:
// - The page reads only `/api/review/…`. A token without a role gets `404` there (the endpoints do
//   not exist for it); the page says so plainly ("a reviewer's role is required") rather than
//   showing an empty queue.
// - Its token is kept apart from the chat page's (`durable-chat.review-token`), so signing in as a
//   reviewer never signs another tab's chat out; without one it tries the chat page's token (a
//   user may chat and review with one token).
// - Live updates come from `/api/review/events`, resumed after the last id applied; the queue's
//   first answer carries the log's `last_event_id`, so nothing between the two is missed, and an
//   event already reflected changes nothing when applied again.
// - Cards are the chat page's approval cards (approvals.js), deciding through the reviewer's
//   endpoints; the conversation so far is rendered by the chat page's transcript (transcript.js).

import { ApiError, api, onUnauthorized, plainError, setToken } from "./api.js";
import { Approvals } from "./approvals.js";
import { byTestId, element, timeElement } from "./dom.js";
import { readEventStream } from "./events.js";
import { TOKEN_KEY, readFragment, userOf } from "./session.js";
import { clearNotice, notify, setConnection } from "./status.js";
import { Transcript } from "./transcript.js";

const REVIEW_TOKEN_KEY = "durable-chat.review-token";
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;
const RECHECK_MS = [2_000, 5_000, 15_000];

const state = {
  token: null,
  user: null,
  lastEventId: 0,
  pending: new Map(), // thread_id + tool_call_id → its item
  cursors: { pending: null, decided: null },
  decidedLoaded: false,
  generation: 0,
};

const $ = (selector) => document.querySelector(selector);
const keyOf = (call) => `${call.thread_id}\n${call.tool_call_id}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------- sign-in

function show(section) {
  for (const id of ["signin", "no-role", "review"]) $(`#${id}`).hidden = id !== section;
  $("#sign-out").hidden = section === "signin";
}

function showSignIn(message) {
  state.generation++;
  state.token = null;
  localStorage.removeItem(REVIEW_TOKEN_KEY);
  setConnection("");
  show("signin");
  byTestId("signed-in-as").hidden = true;
  const error = byTestId("token-error");
  error.textContent = message ?? "";
  error.hidden = !message;
  byTestId("token-input").focus();
}

async function signIn(token) {
  const generation = ++state.generation;
  state.token = token;
  state.user = userOf(token);
  setToken(token);
  const who = byTestId("signed-in-as");
  who.textContent = state.user ? `Reviewing as ${state.user}` : "";
  who.hidden = !state.user;
  state.pending.clear();
  state.cursors = { pending: null, decided: null };
  state.decidedLoaded = false;
  byTestId("pending-items").replaceChildren();
  byTestId("decided-items").replaceChildren();
  selectTab("pending");
  try {
    await loadPending(null, { first: true });
  } catch (error) {
    if (generation !== state.generation) return;
    if (error instanceof ApiError && error.status === 404) return showNoRole();
    if (error instanceof ApiError && error.status === 401) return;
    show("review");
    notify(plainError(error));
  }
  if (generation !== state.generation) return;
  localStorage.setItem(REVIEW_TOKEN_KEY, token);
  show("review");
  followQueue(generation);
}

function showNoRole() {
  state.generation++;
  setConnection("");
  show("no-role");
}

onUnauthorized(() => showSignIn("You are signed out: the link or token was not accepted, or it expired."));

// ---------------------------------------------------------------- the lists

async function loadPending(cursor, { first = false } = {}) {
  const query = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
  const page = await api("GET", `/api/review/approvals?status=pending&limit=50${query}`);
  if (first) state.lastEventId = Math.max(state.lastEventId, page.last_event_id ?? 0);
  for (const call of page.approvals) addPending(call);
  state.cursors.pending = page.next_cursor;
  byTestId("more-pending").hidden = !page.next_cursor;
  updateCounts();
}

async function loadDecided(cursor) {
  const query = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
  const page = await api("GET", `/api/review/approvals?status=decided&limit=50${query}`);
  const list = byTestId("decided-items");
  if (!cursor) list.replaceChildren();
  for (const call of page.approvals) list.append(itemNode(call, { decided: true }));
  state.cursors.decided = page.next_cursor;
  state.decidedLoaded = true;
  byTestId("more-decided").hidden = !page.next_cursor;
  byTestId("decided-empty").hidden = list.childElementCount > 0;
}

function addPending(call) {
  const key = keyOf(call);
  if (state.pending.has(key) || call.status !== "pending") return;
  const item = itemNode(call, { decided: false });
  state.pending.set(key, item);
  byTestId("pending-items").append(item);
  updateCounts();
}

function updateCounts() {
  let waiting = 0;
  for (const item of state.pending.values()) if (!item.dataset.decision && !item.dataset.gone) waiting++;
  byTestId("pending-count").textContent = String(waiting);
  byTestId("queue-empty").hidden = waiting > 0;
}

// ---------------------------------------------------------------- one item

function itemNode(call, { decided }) {
  const item = element("article", "review-item", "review-item");
  item.dataset.threadId = call.thread_id;
  item.dataset.toolCallId = call.tool_call_id;
  item.call = call;
  const header = element("header", "item-header");
  header.append(element("h2", "item-title", "item-title", call.thread_title || "Untitled conversation"));
  const meta = element("p", "item-meta muted", "item-meta");
  meta.append(`${call.user_id} · for `, element("span", "reviewers", "reviewers", call.reviewers), " · asked ");
  meta.append(timeElement(call.created_at, "asked-at"));
  header.append(meta);
  if (!decided) header.append(deadlineNode(call.expires_at));
  item.append(header);
  const escalations = escalationList(call.escalations);
  if (escalations) item.append(escalations);

  item.approvals = new Approvals({
    threadId: () => call.thread_id,
    user: () => state.user,
    placeAfter: () => null,
    append: (card) => item.append(card),
    onDecided: () => {
      const card = item.querySelector('[data-testid="approval-card"]');
      if (card?.dataset.decision) item.dataset.decision = card.dataset.decision;
      item.querySelector('[data-testid="deadline"]')?.remove();
      if (!decided) state.decidedLoaded = false; // the decided tab is read again when shown
      updateCounts();
    },
    reviewing: true,
    threadsPath: "/api/review/threads",
  });
  item.approvals.card(call);
  if (decided) addAudit(item, call);
  item.append(conversationNode(call));
  return item;
}

/** What the chat page's trail leaves out: with which role, and who had it before. */
function addAudit(item, call) {
  const trail = item.querySelector('[data-testid="approval-trail"]');
  if (!trail) return;
  trail.querySelector('[data-testid="decided-role"]')?.remove();
  if (call.decided_role) trail.append(element("p", "muted", "decided-role", `Decided as: ${call.decided_role === "user" ? "the customer" : call.decided_role}`));
  if (call.status === "approved" && !call.override_args) {
    trail.append(element("p", "muted", "approval-unedited", "Ran with the arguments the model asked for."));
  }
}

function escalationList(escalations) {
  if (!escalations?.length) return null;
  const list = element("ul", "escalations", "escalations");
  for (const step of escalations) {
    const line = element("li", null, "escalation");
    line.append(`Escalated from ${step.from} to ${step.to} · `, timeElement(step.at, "escalated-at"));
    list.append(line);
  }
  return list;
}

function deadlineNode(expiresAt) {
  const node = element("p", "deadline", "deadline");
  node.setAttribute("role", "timer");
  if (expiresAt) node.dataset.expiresAt = expiresAt;
  tick(node);
  return node;
}

/** "Expires in 3h 59m", "Expires in 4m 05s", or that the server is deciding it now. */
function tick(node) {
  const expiresAt = node.dataset.expiresAt;
  if (!expiresAt) {
    node.textContent = "No deadline";
    return;
  }
  const left = Math.floor((new Date(expiresAt).getTime() - Date.now()) / 1000);
  node.title = `Deadline ${new Date(expiresAt).toLocaleString()}`;
  node.classList.toggle("urgent", left < 15 * 60);
  if (left <= 0) {
    node.textContent = "Past its deadline: the server is deciding it";
    const item = node.closest('[data-testid="review-item"]');
    if (item && !item.recheck) recheck(item);
    return;
  }
  const h = Math.floor(left / 3600);
  const m = Math.floor((left % 3600) / 60);
  const s = String(left % 60).padStart(2, "0");
  node.textContent = h > 0 ? `Expires in ${h}h ${String(m).padStart(2, "0")}m` : `Expires in ${m}m ${s}s`;
}

/** A deadline passed: the event may not be ours (escalated to another role), so ask the thread. */
async function recheck(item) {
  item.recheck = true;
  const generation = state.generation;
  for (const wait of RECHECK_MS) {
    await sleep(wait);
    if (generation !== state.generation || item.dataset.decision || item.dataset.gone) return;
    try {
      const detail = await api("GET", `/api/review/threads/${encodeURIComponent(item.dataset.threadId)}`);
      const call = (detail.approvals ?? []).find((a) => a.tool_call_id === item.dataset.toolCallId);
      if (call && call.status !== "pending") return applyDecision(call);
      if (call && call.reviewers !== item.call.reviewers) return applyEscalation(call);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return markGone(item, "This call left your queue.");
    }
  }
}

function markGone(item, text) {
  item.dataset.gone = "true";
  for (const testId of ["approval-actions", "editor", "rejecter", "deadline"]) item.querySelector(`[data-testid="${testId}"]`)?.remove();
  item.querySelector('[data-testid="item-gone"]')?.remove();
  item.querySelector("header").append(element("p", "gone", "item-gone", text));
  updateCounts();
}

function conversationNode(call) {
  const details = element("details", "conversation", "conversation");
  details.append(element("summary", null, null, "Conversation so far"));
  const body = element("div", "transcript", "conversation-transcript");
  details.append(body);
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = "true";
    try {
      const detail = await api("GET", `/api/review/threads/${encodeURIComponent(call.thread_id)}`);
      const edited = new Map();
      for (const a of detail.approvals ?? []) if (a.status === "approved" && a.override_args) edited.set(a.tool_call_id, a.override_args);
      const transcript = new Transcript(body, {});
      transcript.renderStored(detail.messages, edited);
      for (const a of detail.approvals ?? []) if (a.status === "pending") transcript.waiting(a.tool_call_id);
    } catch (error) {
      delete details.dataset.loaded;
      body.replaceChildren(element("p", "error", "conversation-error", plainError(error)));
    }
  });
  return details;
}

// ---------------------------------------------------------------- live updates

function applyDecision(data) {
  const item = state.pending.get(keyOf(data));
  if (item) {
    item.approvals.decided(data.tool_call_id, { ...data, decision: data.status });
    item.call = { ...item.call, ...data };
    addAudit(item, item.call);
  }
  state.decidedLoaded = false;
  if (!byTestId("decided-panel").hidden) loadDecided(null).catch((error) => notify(plainError(error)));
}

function applyEscalation(data) {
  const item = state.pending.get(keyOf(data));
  if (!item) return addFromThread(data);
  item.call = { ...item.call, ...data };
  item.recheck = false;
  item.querySelector('[data-testid="reviewers"]').textContent = data.reviewers;
  item.querySelector('[data-testid="escalations"]')?.remove();
  const list = escalationList(data.escalations);
  if (list) item.querySelector("header").after(list);
  const deadline = item.querySelector('[data-testid="deadline"]');
  if (deadline) {
    if (data.expires_at) deadline.dataset.expiresAt = data.expires_at;
    else delete deadline.dataset.expiresAt;
    tick(deadline);
  }
}

/** A call new to this reviewer: its thread gives the title and the app's context the event lacks. */
async function addFromThread(data) {
  try {
    const detail = await api("GET", `/api/review/threads/${encodeURIComponent(data.thread_id)}`);
    const call = (detail.approvals ?? []).find((a) => a.tool_call_id === data.tool_call_id);
    if (call?.status === "pending") addPending({ ...call, user_id: detail.user_id, thread_title: detail.title });
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) notify(plainError(error));
  }
}

function onFrame(frame) {
  const id = Number(frame.id);
  if (!Number.isSafeInteger(id) || id <= state.lastEventId) return;
  state.lastEventId = id;
  let data;
  try {
    data = JSON.parse(frame.data);
  } catch {
    return;
  }
  switch (frame.event) {
    case "approval_requested":
      if (!state.pending.has(keyOf(data))) addFromThread(data);
      break;
    case "approval_decided":
    case "approval_expired":
      applyDecision(data);
      break;
    case "approval_escalated":
      applyEscalation(data);
      break;
  }
}

async function followQueue(generation) {
  let delay = RETRY_MIN_MS;
  const active = () => generation === state.generation;
  while (active()) {
    try {
      const response = await fetch(`/api/review/events?after=${state.lastEventId}`, {
        headers: { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" },
        cache: "no-store",
      });
      if (!active()) return response.body?.cancel();
      if (response.status === 401) return showSignIn("You are signed out: the link or token was not accepted, or it expired.");
      if (response.status === 404) return showNoRole();
      if (!response.ok || !response.body) throw new Error(`the stream answered ${response.status}`);
      setConnection("live");
      clearNotice("info");
      const before = state.lastEventId;
      await readEventStream(response.body, (frame) => {
        if (active()) onFrame(frame);
      });
      if (state.lastEventId > before) delay = RETRY_MIN_MS;
    } catch {
      // the stream broke: follow it again below
    }
    if (!active()) return;
    setConnection("reconnecting");
    await sleep(delay + Math.random() * delay * 0.2);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

// ---------------------------------------------------------------- tabs and wiring

function selectTab(name) {
  for (const tab of ["pending", "decided"]) {
    const selected = tab === name;
    const button = byTestId(`tab-${tab}`);
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    byTestId(`${tab}-panel`).hidden = !selected;
  }
  if (name === "decided" && !state.decidedLoaded) loadDecided(null).catch((error) => notify(plainError(error)));
}

function wire() {
  byTestId("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = byTestId("token-input").value.trim();
    if (value) signIn(value);
  });
  $("#sign-out").addEventListener("click", () => showSignIn(null));
  byTestId("dismiss-notice").addEventListener("click", () => clearNotice());
  for (const tab of ["pending", "decided"]) byTestId(`tab-${tab}`).addEventListener("click", () => selectTab(tab));
  $(".tabs").addEventListener("keydown", (event) => {
    if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
    const next = byTestId("tab-pending").getAttribute("aria-selected") === "true" ? "decided" : "pending";
    selectTab(next);
    byTestId(`tab-${next}`).focus();
  });
  byTestId("more-pending").addEventListener("click", () => loadPending(state.cursors.pending).catch((error) => notify(plainError(error))));
  byTestId("more-decided").addEventListener("click", () => loadDecided(state.cursors.decided).catch((error) => notify(plainError(error))));
  setInterval(() => {
    for (const node of document.querySelectorAll('[data-testid="deadline"]')) tick(node);
  }, 1000);
  window.addEventListener("hashchange", () => {
    const { token } = readFragment();
    if (token) signIn(token);
  });
  const { token } = readFragment();
  const known = token ?? localStorage.getItem(REVIEW_TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
  if (known) signIn(known);
  else showSignIn(null);
}

wire();
