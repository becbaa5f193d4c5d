// Approval cards: a tool call waits for a human; the card decides it, then keeps the decision
// trail (who, when, the arguments the model asked for and those that ran, the reason).

import { api, plainError } from "./api.js";
import { button, element, fieldList, prettyJson, row, timeElement } from "./dom.js";

/** `key: old → new` for each argument a reviewer changed. */
export function argumentChanges(original, edited) {
  const before = original && typeof original === "object" ? original : {};
  const after = edited && typeof edited === "object" ? edited : {};
  const changes = [];
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const was = key in before ? JSON.stringify(before[key]) : "(none)";
    const now = key in after ? JSON.stringify(after[key]) : "(removed)";
    if (was !== now) changes.push(`${key}: ${was} → ${now}`);
  }
  return changes;
}

export class Approvals {
  /** `hooks`: `threadId()`, `user()`, `placeAfter(toolCallId)` (the element a card follows, or null), `append(card)`, `onDecided(toolCallId, overrideArgs)`; optional `reviewing` (the page is a reviewer's: a call for a role gets buttons too) and `threadsPath` (where decisions go: `/api/threads` unless the review page says `/api/review/threads`). */
  constructor(hooks) {
    this.hooks = hooks;
    this.cards = new Map();
  }

  clear() {
    this.cards.clear();
  }

  /** Forget the cards no longer shown (a regenerated reply replaced them). */
  prune() {
    for (const [key, card] of this.cards) if (!card.isConnected) this.cards.delete(key);
  }

  pendingCount() {
    let count = 0;
    for (const card of this.cards.values()) if (!card.dataset.decision) count++;
    return count;
  }

  /** The reviewers every pending card waits for, when none is this user's to decide (else null). */
  waitingForReviewers() {
    const reviewers = new Set();
    for (const card of this.cards.values()) {
      if (card.dataset.decision) continue;
      if (!card.dataset.reviewers) return null;
      reviewers.add(card.dataset.reviewers);
    }
    return reviewers.size ? [...reviewers].join(", ") : null;
  }

  firstPending() {
    for (const card of this.cards.values()) if (!card.dataset.decision) return card;
    return null;
  }

  /** The card of `call` (created when new): pending, or decided when `call.status` says so. */
  card(call) {
    if (!call?.tool_call_id) return null;
    let card = this.cards.get(call.tool_call_id);
    if (card && call.outcome === "unknown" && card.dataset.decision && call.status !== card.dataset.decision) {
      // Held again after a crash: the earlier card keeps its decision; a new one asks again.
      this.cards.set(`${call.tool_call_id}#earlier`, card);
      card = undefined;
    }
    if (!card) {
      card = this.build(call);
      this.cards.set(call.tool_call_id, card);
      const anchor = this.hooks.placeAfter(call.tool_call_id, call);
      if (anchor) anchor.after(card);
      else this.hooks.append(card);
    }
    if (call.status === "approved" || call.status === "rejected") {
      this.decided(call.tool_call_id, {
        decision: call.status,
        decided_by: call.decided_by,
        decided_at: call.decided_at,
        override_args: call.override_args,
        reason: call.reason,
      });
    }
    return card;
  }

  /** Add the app's facts for the reviewer to the pending cards of `trail` (a thread's approvals). */
  addContexts(trail) {
    for (const approval of trail) if (approval.status === "pending" && approval.context) this.addContext(approval.tool_call_id, approval.context);
  }

  /** Add the app's facts for the reviewer to a pending card that has none yet. */
  addContext(toolCallId, context) {
    const card = this.cards.get(toolCallId);
    if (!card || card.querySelector('[data-testid="approval-context"]')) return;
    const list = contextList(context);
    if (list) card.querySelector('[data-testid="approval-heading"]').after(list);
  }

  build(call) {
    const toolCallId = call.tool_call_id;
    const args = call.args ?? {};
    const card = element("section", "approval-card", "approval-card");
    card.dataset.toolCallId = toolCallId;
    if (call.agent) card.dataset.agent = call.agent;
    card.originalArgs = args;
    card.setAttribute("aria-label", `Approval for ${call.tool_name}`);

    const heading = element("h3", null, "approval-heading");
    heading.append("Approve ", element("code", null, "tool-name", call.tool_name), "?");
    card.append(heading);
    const chain = chainLine(call);
    if (chain) card.append(chain);
    const unknown = call.outcome === "unknown";
    if (unknown) card.append(unknownOutcome(call.previous));
    const context = contextList(call.context);
    if (context) card.append(context);
    const metadata = metadataList(call.metadata);
    if (metadata) card.append(metadata);
    card.append(element("pre", "args", "approval-args", prettyJson(args)));
    const waitingFor = !this.hooks.reviewing && call.reviewers && call.reviewers !== "user" ? call.reviewers : null;
    if (waitingFor) {
      // A reviewer with a role decides it (the server refuses this user): no buttons, who and by when.
      card.dataset.reviewers = waitingFor;
      heading.replaceChildren("Waiting for ", element("strong", null, "approval-reviewers", waitingFor), ": ", element("code", null, "tool-name", call.tool_name));
      card.append(awaitingReviewer(waitingFor, call.expires_at));
      return card;
    }

    const actions = element("div", "actions", "approval-actions");
    const approve = button(unknown ? "Run it again" : "Approve", "primary", "approve");
    const edit = button("Edit", null, "edit");
    const reject = button("Reject", "danger", "reject");
    // A call of unknown outcome runs again as it was (the server refuses edits): no Edit.
    actions.append(...(unknown ? [approve, reject] : [approve, edit, reject]));

    const editor = element("div", "editor", "editor");
    editor.hidden = true;
    const editorLabel = element("label", null, null, "Arguments (JSON)");
    editorLabel.htmlFor = `args-${toolCallId}`;
    const textarea = element("textarea", null, "args-editor");
    textarea.id = editorLabel.htmlFor;
    textarea.rows = 6;
    textarea.spellcheck = false;
    textarea.value = prettyJson(args);
    const save = button("Save & approve", "primary", "save-approve");
    const cancelEdit = button("Cancel", null, "cancel-edit");
    editor.append(editorLabel, textarea, row(save, cancelEdit));

    const rejecter = element("div", "rejecter", "rejecter");
    rejecter.hidden = true;
    const reasonLabel = element("label", null, null, "Reason (optional)");
    reasonLabel.htmlFor = `reason-${toolCallId}`;
    const reason = element("input", null, "reason-input");
    reason.id = reasonLabel.htmlFor;
    reason.type = "text";
    reason.placeholder = "Why reject this call?";
    const confirmReject = button("Reject call", "danger", "confirm-reject");
    const cancelReject = button("Cancel", null, "cancel-reject");
    rejecter.append(reasonLabel, reason, row(confirmReject, cancelReject));

    const error = element("p", "error", "approval-error");
    error.setAttribute("role", "alert");
    error.hidden = true;
    card.append(actions, editor, rejecter, error);

    const decide = async (path, body, busy) => {
      error.hidden = true;
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      busy.setAttribute("aria-busy", "true");
      try {
        const threadId = encodeURIComponent(this.hooks.threadId());
        const threads = this.hooks.threadsPath ?? "/api/threads";
        const answer = await api("POST", `${threads}/${threadId}/tool-calls/${encodeURIComponent(toolCallId)}/${path}`, body);
        this.decided(toolCallId, {
          decision: answer.decision,
          decided_by: this.hooks.user(),
          decided_at: answer.decided_at ?? new Date().toISOString(),
          override_args: body.override_args ?? null,
          reason: body.reason ?? null,
        });
      } catch (err) {
        error.textContent = err?.code === "invalid_arguments" || err?.code === "validation_error" ? err.message : plainError(err);
        error.hidden = false;
      } finally {
        busy.removeAttribute("aria-busy");
        for (const b of card.querySelectorAll("button")) b.disabled = false;
      }
    };
    const showError = (text) => {
      error.textContent = text;
      error.hidden = false;
    };

    approve.addEventListener("click", () => decide("approve", {}, approve));
    edit.addEventListener("click", () => {
      rejecter.hidden = true;
      editor.hidden = false;
      textarea.focus();
    });
    cancelEdit.addEventListener("click", () => {
      editor.hidden = true;
      error.hidden = true;
      edit.focus();
    });
    save.addEventListener("click", () => {
      let overrideArgs;
      try {
        overrideArgs = JSON.parse(textarea.value);
      } catch (err) {
        showError(`Invalid JSON: ${err.message}`);
        return;
      }
      if (overrideArgs === null || typeof overrideArgs !== "object" || Array.isArray(overrideArgs)) {
        showError("The arguments must be a JSON object.");
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
    return card;
  }

  /** Show `decision` on the card: who, when, the edits, the reason. The stream's event names the approver and wins over the POST's answer. */
  decided(toolCallId, decision) {
    const card = this.cards.get(toolCallId);
    if (!card || !decision.decision) return;
    if (card.dataset.decision && card.dataset.decidedBy && !decision.decided_by) return;
    const focused = card.contains(document.activeElement);
    card.dataset.decision = decision.decision;
    if (decision.decided_by) card.dataset.decidedBy = decision.decided_by;
    card.classList.remove("decided-approved", "decided-rejected");
    card.classList.add(`decided-${decision.decision}`);
    for (const testId of ["approval-actions", "editor", "rejecter", "approval-error", "awaiting-reviewer"]) {
      card.querySelector(`[data-testid="${testId}"]`)?.remove();
    }
    const heading = card.querySelector('[data-testid="approval-heading"]');
    const toolName = heading.querySelector('[data-testid="tool-name"]');
    heading.replaceChildren(toolName, decision.decision === "approved" ? " — approved" : " — rejected");
    card.querySelector('[data-testid="approval-trail"]')?.remove();
    const trail = element("div", "trail", "approval-trail");
    const line = element("p", "decision", "approval-decision");
    line.append(decision.decision === "approved" ? "Approved" : "Rejected");
    if (decision.decided_by) line.append(` by ${decision.decided_by}`);
    if (decision.decided_at) line.append(" · ", timeElement(decision.decided_at, "decided-at"));
    trail.append(line);
    const edits = decision.decision === "approved" && decision.override_args ? argumentChanges(card.originalArgs, decision.override_args) : [];
    if (decision.decision === "approved" && decision.override_args) {
      card.querySelector('[data-testid="approval-args"]').textContent = prettyJson(decision.override_args);
      const box = element("div", "edits", "approval-edits");
      box.append(element("p", null, null, "Edited before it ran:"));
      const list = element("ul");
      for (const change of edits.length ? edits : ["(the same arguments)"]) list.append(element("li", null, "approval-edit", change));
      const original = element("details", "original");
      original.append(element("summary", null, null, "Arguments the model asked for"), element("pre", "args", "approval-original-args", prettyJson(card.originalArgs)));
      box.append(list, original);
      trail.append(box);
    }
    if (decision.reason) trail.append(element("p", "reason", "approval-reason", `Reason: “${decision.reason}”`));
    card.append(trail);
    if (focused) {
      // The buttons that had focus are gone: keep it on the card, not lost to the page.
      card.setAttribute("tabindex", "-1");
      card.focus();
    }
    this.hooks.onDecided(toolCallId, decision.decision === "approved" ? decision.override_args : null);
  }
}

/** A call the customer cannot decide: the role deciding it, and its deadline. */
function awaitingReviewer(reviewers, expiresAt) {
  const note = element("p", "awaiting-reviewer", "awaiting-reviewer");
  note.setAttribute("role", "note");
  note.append(`A reviewer (${reviewers}) decides this request; the reply goes on once they have.`);
  if (expiresAt) note.append(" Deadline: ", timeElement(expiresAt, "approval-deadline"), ".");
  return note;
}

/** Which agent asks, and through which agents (`path`, outermost first): "Asked by payments · travel › booking › payments". */
export function chainLine(call) {
  const path = Array.isArray(call?.path) ? call.path.map(String) : [];
  const agent = call?.agent ?? path[path.length - 1];
  if (!agent) return null;
  const line = element("p", "approval-path", "approval-path");
  line.append("Asked by ", element("strong", null, "approval-agent", agent));
  if (path.length > 1) {
    line.append(" · ", element("span", "chain", "approval-chain", path.join(" › ")));
    line.title = `The ${path[0]} agent delegated to ${path.slice(1).join(", then ")}; the decision goes back up the same way.`;
  }
  return line;
}

/** What a reviewer must know of a call held again after a crash: it may or may not have acted. */
function unknownOutcome(previous) {
  const notice = element("div", "outcome-unknown", "approval-outcome-unknown");
  notice.setAttribute("role", "note");
  notice.append(
    element(
      "p",
      null,
      null,
      "Outcome unknown: this call was started, and the server running it stopped before it finished. " +
        "It may or may not have happened. Check, then run it again (the service sees the same request " +
        "and should not repeat it) or reject it, saying what you found.",
    ),
  );
  if (previous?.status) {
    const line = element("p", "decision", "approval-previous");
    line.append(`${previous.status === "approved" ? "Approved" : "Rejected"} earlier`);
    if (previous.decided_by) line.append(` by ${previous.decided_by}`);
    if (previous.decided_at) line.append(" · ", timeElement(previous.decided_at, "previous-decided-at"));
    notice.append(line);
  }
  return notice;
}

/** What the tool said about the call when it held it (`ApprovalRequired(metadata=...)`), field by field. */
function metadataList(metadata) {
  if (!metadata || typeof metadata !== "object" || Array.isArray(metadata) || !Object.keys(metadata).length) return null;
  const box = element("div", "metadata", "approval-metadata");
  box.append(element("p", "metadata-label", null, "About this call"), fieldList(metadata, "context"));
  return box;
}

function contextList(context) {
  if (!context || typeof context !== "object") return null;
  const entries = Object.entries(context).filter(([, value]) => typeof value === "string" || typeof value === "number");
  if (!entries.length) return null;
  const list = element("dl", "context", "approval-context");
  for (const [label, value] of entries) list.append(element("dt", null, null, label), element("dd", null, null, String(value)));
  return list;
}
