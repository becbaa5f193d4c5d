// The conversation as the page shows it: messages, replies in markdown, tool steps, notices.
//
// Everything a user or a model wrote goes in as text, except replies, which go through the
// sanitising markdown renderer (markdown.js).

import { attachmentsNode } from "./files.js";
import { button, compactJson, copyText, element, fieldList, fieldText, timeElement } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const STATUS_TEXT = {
  calling: "running…",
  waiting: "waiting for approval",
  success: "done",
  refused: "refused",
  denied: "rejected",
  failed: "failed",
  interrupted: "stopped",
};

/** Why a tool that ran says it did not do what was asked (its business rules refused), if it does. */
export function refusal(content) {
  if (content === null || typeof content !== "object" || Array.isArray(content)) return null;
  if (typeof content.error === "string") return content.error;
  for (const key of ["accepted", "cancelled", "ok", "success", "allowed"]) {
    if (content[key] === false) return typeof content.message === "string" ? content.message : "refused";
  }
  return null;
}

/** A type's name as words: `NoFlightFound` → "No flight found". */
export function typeLabel(typeName) {
  const words = String(typeName ?? "Output")
    .replace(/[_-]+/g, " ")
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .trim()
    .split(/\s+/);
  const text = words.map((word, index) => (index > 0 && !/^[A-Z0-9]+$/.test(word) ? word.toLowerCase() : word)).join(" ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** `lookup_order` → "Lookup order", with its first short arguments: "Lookup order · ORD-5678". */
export function toolLabel(toolName, args) {
  const name = String(toolName ?? "tool").replace(/[_-]+/g, " ").trim();
  const title = name.charAt(0).toUpperCase() + name.slice(1);
  const values = [];
  if (args && typeof args === "object") {
    for (const value of Object.values(args)) {
      if (typeof value === "string" || typeof value === "number") values.push(String(value));
      if (values.join(", ").length > 40) break;
    }
  }
  let detail = values.join(", ");
  if (detail.length > 48) detail = `${detail.slice(0, 47)}…`;
  return detail ? `${title} · ${detail}` : title;
}

/** The agent that gave a stored reply, as the server noted it (`provider_details.durable_chat_agent`). */
export const agentOf = (message) => message?.provider_details?.durable_chat_agent ?? null;

/** `billing` → "Billing". */
const capitalised = (name) => String(name).charAt(0).toUpperCase() + String(name).slice(1);

const runOf = (taggedRunId) => (taggedRunId ? String(taggedRunId).replace(/\.\d+$/, "") : null);

export class Transcript {
  constructor(container, hooks) {
    this.container = container;
    this.hooks = hooks; // { loadDelegation(toolCallId) → the delegated agent's stored messages, or null }
    this.clear();
  }

  clear() {
    this.container.replaceChildren();
    this.parts = new Map(); // part_id → { node, raw, turn }
    this.steps = new Map(); // tool_call_id → step element
    this.outputs = new Map(); // run_id → its structured output's card
    this.pending = null; // a frame is scheduled to render streamed markdown
    this.storedParts = 0; // numbers the stored reply parts (their ids)
    // Names show once another agent speaks (a hand-off, a delegation): the server names every
    // reply's agent, and a thread one agent answers shows none.
    this.container.classList.add("one-agent");
  }

  /** Another agent spoke (a hand-off, or `nested`: a delegated agent): every reply shows its name. */
  sawAgent(nested = false) {
    if (nested) this.container.classList.remove("one-agent");
  }

  // -- who spoke -----------------------------------------------------------------------------

  /** Where an event goes: inside the step of the call that delegated (`who.parent`), else the conversation. */
  target(who) {
    const step = who?.parent ? this.steps.get(who.parent) : null;
    return step ? this.delegation(step, who.agent).body : this.container;
  }

  /** The delegated agent's steps inside `step` (the call that delegated), created when new. */
  delegation(step, agent) {
    let box = step.querySelector(':scope > [data-testid="delegation"]');
    if (!box) {
      box = element("div", "delegation", "delegation");
      box.append(element("p", "delegation-agent", "delegation-agent"), element("div", "delegation-body", "delegation-body"));
      step.append(box);
    }
    if (agent && !step.dataset.delegatedTo) {
      step.dataset.delegatedTo = agent;
      box.querySelector('[data-testid="delegation-agent"]').textContent = `${capitalised(agent)} worked on it:`;
      const badge = element("span", "badge agent-badge", "delegated-to", `→ ${agent}`);
      badge.title = `This call asked the ${agent} agent; open it to see its steps.`;
      step.querySelector(".tool-summary .tool-label").after(badge);
    }
    return { box, body: box.querySelector('[data-testid="delegation-body"]') };
  }

  /** A hand-off: from here on `agent` answers. */
  agentChanged(agent) {
    const node = element("div", "agent-changed", "agent-changed", `${capitalised(agent)} took over`);
    node.setAttribute("role", "note");
    node.dataset.agent = agent;
    this.sawAgent(true);
    this.container.append(node);
    return node;
  }

  /** A stored step's delegated conversation, read when the step is first opened (after a reload). */
  loadOnOpen(step) {
    step.addEventListener("toggle", () => {
      if (step.open) this.loadDelegation(step);
    });
  }

  /** Read and render the delegated conversation of a stored step (once); `unfinished`: then those of its calls still open. */
  async loadDelegation(step, { unfinished = false } = {}) {
    if (step.dataset.delegationLoaded || step.querySelector(':scope > [data-testid="delegation"]')) return;
    step.dataset.delegationLoaded = "loading";
    const messages = await this.hooks.loadDelegation?.(step.dataset.toolCallId);
    step.dataset.delegationLoaded = messages ? "true" : "none";
    if (!messages || !step.isConnected) return;
    this.renderStored(messages, new Map(), step.dataset.toolCallId);
    if (!unfinished) return;
    for (const inner of step.querySelectorAll('[data-testid="tool-step"][data-status="calling"]')) await this.loadDelegation(inner, { unfinished });
  }

  /**
   * After a reload with a delegated agent's call pending: read the delegations it waits inside, so
   * the run's resumed events find their steps, and show the calls waiting.
   */
  async loadPending(trail) {
    const pending = trail.filter((approval) => approval.status === "pending");
    if (!pending.some((approval) => !this.steps.has(approval.tool_call_id) && approval.path?.length > 1)) return;
    for (const step of this.openSteps()) await this.loadDelegation(step, { unfinished: true });
    for (const approval of pending) this.waiting(approval.tool_call_id);
  }

  /** The run's own steps that have no result yet (after a reload, a pause's calls). */
  openSteps() {
    return [...this.container.querySelectorAll(':scope > [data-testid="tool-step"]')].filter((step) => step.dataset.status === "calling" || step.dataset.status === "waiting");
  }

  // -- stored messages ----------------------------------------------------------------------

  /** Render a stored conversation; `edited` maps tool_call_id → the arguments a reviewer put in their place. */
  renderStored(messages, edited, parent = null) {
    let lastRun = null;
    let speaker = null;
    for (const message of messages ?? []) {
      // A reply the server wrote itself (a run's turn limit) names no run: it is the previous one's.
      const runId = runOf(message.run_id) ?? lastRun;
      lastRun = runId;
      if (message.kind === "request") {
        for (const part of message.parts ?? []) {
          if (part.part_kind === "user-prompt" && parent) continue; // the task its parent call gave: in the call's arguments
          if (part.part_kind === "user-prompt") this.userMessage(promptText(part.content), part.timestamp, attachmentsOf(part.content));
          else if (part.part_kind === "tool-return") {
            // A call pydantic-ai asked again for (its arguments were refused) failed, as the stream says.
            const outcome = part.outcome === "retried" ? "failed" : part.outcome ?? "success";
            this.toolResult(part.tool_call_id, part.tool_name, outcome, part.content, { parent });
          }
        }
      } else {
        const metadata = message.metadata ?? {};
        const agent = agentOf(message);
        // A hand-off shows where the next agent's first reply begins.
        if (!parent && agent && speaker && agent !== speaker) this.agentChanged(agent);
        if (agent) speaker = agent;
        const who = { agent, parent };
        if (metadata.blocked_by) this.notice("guardrail", `Guardrail “${metadata.blocked_by}” stopped this message.`);
        (message.parts ?? []).forEach((part, index) => {
          if (part.part_kind === "text" && part.content) {
            const node = this.text(`stored-${this.storedParts++}-${index}`, part.content, runId, message.timestamp, who);
            if (metadata.withdrawn) this.markWithdrawn(node);
          } else if (part.part_kind === "tool-call") {
            const args = parseArgs(part.args);
            const step = this.toolCall(part.tool_call_id, part.tool_name, args, runId, who);
            this.loadOnOpen(step);
            if (edited.has(part.tool_call_id)) this.markEdited(part.tool_call_id, edited.get(part.tool_call_id), args);
          }
        });
      }
      // A cancelled turn ends with an interrupted response (a request may be interrupted too: its steps say so).
      if (message.state === "interrupted" && message.kind === "response" && !parent) this.stopped(runId);
    }
  }

  // -- messages and replies ------------------------------------------------------------------

  userMessage(content, when, attachments) {
    const turn = element("div", "turn user", "user-turn");
    const message = element("div", "msg user", "user-message", content ?? "");
    turn.append(message);
    if (attachments?.length) turn.append(attachmentsNode(attachments));
    turn.append(this.meta(when));
    this.container.append(turn);
  }

  /** The reply part `partId`, created when new, its whole text set to `text`. */
  text(partId, text, runId, when, who) {
    const part = this.part(partId, runId, when, who);
    part.raw = text ?? "";
    part.node.classList.remove("streaming");
    renderMarkdown(part.node, part.raw);
    return part.node;
  }

  appendText(partId, delta, runId, who) {
    const part = this.part(partId, runId, undefined, who);
    part.raw += delta ?? "";
    part.node.classList.add("streaming");
    // Markdown is rendered once per frame, not once per word.
    if (!this.pending) {
      this.pending = requestAnimationFrame(() => {
        this.pending = null;
        for (const each of this.parts.values()) {
          if (each.node.classList.contains("streaming")) renderMarkdown(each.node, each.raw);
        }
      });
    }
  }

  withdrawn(partId, replacement, runId, who) {
    this.markWithdrawn(this.text(partId, replacement, runId, undefined, who));
  }

  markWithdrawn(node) {
    node.classList.add("withdrawn");
    node.dataset.withdrawn = "true";
    node.title = "The original reply was withdrawn by a guardrail.";
  }

  finish() {
    for (const part of this.parts.values()) {
      if (part.node.classList.contains("streaming")) {
        part.node.classList.remove("streaming");
        renderMarkdown(part.node, part.raw);
      }
    }
  }

  part(partId, runId, when, who) {
    let part = this.parts.get(partId);
    if (part) return part;
    // A delegated agent's reply sits inside the call that asked it, apart from the thread's replies.
    const nested = Boolean(who?.parent && this.steps.has(who.parent));
    const turn = element("div", nested ? "turn assistant delegated" : "turn assistant", nested ? "delegated-turn" : "assistant-turn");
    if (runId) turn.dataset.runId = runId;
    if (who?.agent) {
      this.sawAgent(nested);
      turn.dataset.agent = who.agent;
      turn.append(element("span", "agent-name", "agent-name", who.agent));
    }
    const node = element("div", "msg assistant markdown", nested ? "delegated-text" : "assistant-text");
    node.dataset.partId = partId;
    part = { node, raw: "", turn };
    const meta = this.meta(when ?? new Date());
    const copy = button("Copy", "link", "copy-reply");
    copy.setAttribute("aria-label", "Copy this reply");
    copy.addEventListener("click", () => copyText(part.raw, copy));
    meta.append(copy);
    if (runId) {
      const run = button(`run ${runId.slice(0, 8)}`, "link run-id", "reply-run-id");
      run.title = `durable-chat trace ${runId}`;
      run.setAttribute("aria-label", `Copy the trace command of run ${runId}`);
      run.addEventListener("click", () => copyText(`durable-chat trace ${runId}`, run));
      meta.append(run);
    }
    turn.append(node, meta);
    this.target(who).append(turn);
    this.parts.set(partId, part);
    return part;
  }

  meta(when) {
    const meta = element("div", "msg-meta");
    meta.append(timeElement(when ?? new Date()));
    return meta;
  }

  /** A regenerated reply replaces everything after the last user message. */
  trimAfterLastUser() {
    const users = this.container.querySelectorAll('[data-testid="user-turn"]');
    const last = users.length ? users[users.length - 1] : null;
    if (!last) return;
    while (last.nextElementSibling) last.nextElementSibling.remove();
    for (const [key, part] of this.parts) if (!part.turn.isConnected) this.parts.delete(key);
    for (const [key, step] of this.steps) if (!step.isConnected) this.steps.delete(key);
    for (const [key, card] of this.outputs) if (!card.isConnected) this.outputs.delete(key);
  }

  lastAssistantTurn() {
    const turns = this.container.querySelectorAll('[data-testid="assistant-turn"]');
    return turns.length ? turns[turns.length - 1] : null;
  }

  // -- tool steps ----------------------------------------------------------------------------

  toolCall(toolCallId, toolName, args, runId, who) {
    if (toolCallId && this.steps.has(toolCallId)) return this.steps.get(toolCallId);
    const step = element("details", "tool-step", "tool-step");
    step.dataset.status = "calling";
    if (toolCallId) step.dataset.toolCallId = toolCallId;
    if (runId) step.dataset.runId = runId;
    const summary = element("summary", "tool-summary");
    summary.append(
      element("span", "tool-label", "tool-label", toolLabel(toolName, args)),
      element("span", "badge", "tool-status", STATUS_TEXT.calling),
    );
    const call = element("div", "tool tool-call", "tool-call");
    call.append(
      element("span", "tool-kind", null, "call"),
      element("code", "tool-name", "tool-name", toolName),
      element("code", "tool-args", "tool-args", compactJson(args)),
    );
    step.append(summary, call);
    if (who?.agent) step.dataset.agent = who.agent;
    this.target(who).append(step);
    if (toolCallId) this.steps.set(toolCallId, step);
    return step;
  }

  toolResult(toolCallId, toolName, outcome, content, who) {
    let step = toolCallId ? this.steps.get(toolCallId) : undefined;
    if (!step) step = this.toolCall(toolCallId, toolName, {}, null, who);
    if (step.querySelector(':scope > [data-testid="tool-result"]')) return;
    const refused = outcome === "success" ? refusal(content) : null;
    const status = refused !== null ? "refused" : outcome;
    const result = element("div", `tool tool-result outcome-${outcome}`, "tool-result");
    result.dataset.outcome = outcome;
    result.append(
      element("span", "tool-kind", null, "result"),
      element("code", "tool-name", "tool-name", toolName),
      element("span", "badge", "tool-outcome", outcome),
      element("code", "tool-content", "tool-content", compactJson(content)),
    );
    if (refused !== null) result.append(element("p", "tool-refusal", "tool-refusal", refused));
    // A delegated agent's steps stay above the result of the call that asked it.
    const delegated = step.querySelector(':scope > [data-testid="delegation"]');
    if (delegated) delegated.before(result);
    else step.append(result);
    this.setStatus(step, status);
  }

  setStatus(step, status) {
    step.dataset.status = status;
    step.querySelector('[data-testid="tool-status"]').textContent = STATUS_TEXT[status] ?? status;
  }

  /** The step of a call a human must decide on: waiting, or decided. */
  waiting(toolCallId) {
    // The calls that delegated to it wait too: theirs is the step a collapsed transcript shows.
    for (let step = this.steps.get(toolCallId); step; step = step.parentElement?.closest('[data-testid="tool-step"]')) {
      if (step.dataset.status === "calling") this.setStatus(step, "waiting");
    }
  }

  /** The call ran with a reviewer's arguments: its line shows those, and says so. */
  markEdited(toolCallId, overrideArgs, originalArgs) {
    const step = this.steps.get(toolCallId);
    if (!step || !overrideArgs || step.querySelector('[data-testid="edited-marker"]')) return;
    const call = step.querySelector('[data-testid="tool-call"]');
    const argsNode = call.querySelector('[data-testid="tool-args"]');
    const original = originalArgs ?? argsNode.textContent;
    argsNode.textContent = compactJson(overrideArgs);
    const marker = element("span", "edited", "edited-marker", "edited by the reviewer");
    marker.title = `The model asked for ${compactJson(original)}`;
    call.append(marker);
    step.querySelector('[data-testid="tool-label"]').textContent = toolLabel(
      call.querySelector('[data-testid="tool-name"]').textContent,
      overrideArgs,
    );
  }

  stepOf(toolCallId) {
    return this.steps.get(toolCallId) ?? null;
  }

  /** The step a card about `toolCallId` follows: its own, or for a delegated agent's call, the outermost call that delegated. */
  anchorOf(toolCallId, delegated = false) {
    // Not read yet (after a reload): the last call of the run's own still open is the one that delegated.
    let step = this.steps.get(toolCallId) ?? (delegated ? this.openSteps().at(-1) : undefined);
    for (let outer = step?.parentElement?.closest('[data-testid="tool-step"]'); outer; outer = outer.parentElement?.closest('[data-testid="tool-step"]')) step = outer;
    return step ?? null;
  }

  // -- structured output ---------------------------------------------------------------------

  /** The structured output of run `runId` as a card of its fields, after the call that gave it (else at the end). */
  output(runId, value, outputType, toolCallId) {
    if (this.outputs.has(runId)) return this.outputs.get(runId);
    const card = element("section", "output-card", "output-card");
    card.dataset.outputType = outputType ?? "";
    if (runId) card.dataset.runId = runId;
    const label = typeLabel(outputType);
    card.setAttribute("aria-label", `Result: ${label}`);
    const heading = element("h3", null, "output-type", label);
    heading.title = outputType ?? "";
    card.append(heading);
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      if (Object.keys(value).length) card.append(fieldList(value, "fields", "output-fields"));
      else card.append(element("p", "muted", "output-empty", "No details."));
    } else if (Array.isArray(value)) {
      const list = element("ul", "fields", "output-items");
      for (const item of value) list.append(element("li", null, null, fieldText(item)));
      card.append(list);
    } else {
      card.append(element("p", "output-value", "output-value", fieldText(value)));
    }
    const meta = element("div", "msg-meta");
    const copy = button("Copy JSON", "link", "copy-output");
    copy.setAttribute("aria-label", `Copy the ${label} result as JSON`);
    copy.addEventListener("click", () => copyText(JSON.stringify(value, null, 2), copy));
    meta.append(copy);
    card.append(meta);
    const step = toolCallId ? this.steps.get(toolCallId) : null;
    if (step?.isConnected) step.after(card);
    else this.container.append(card);
    if (runId) this.outputs.set(runId, card);
    return card;
  }

  // -- notices -------------------------------------------------------------------------------

  notice(testId, text) {
    const node = element("div", `notice ${testId}`, testId, text);
    this.container.append(node);
    return node;
  }

  /** The run stopped here on a user's request: the reply above it (if any) is partial. */
  stopped(runId) {
    for (const part of this.parts.values()) {
      if (runId && part.turn.dataset.runId === runId) part.node.classList.add("partial");
    }
    for (const step of this.steps.values()) {
      if (step.dataset.status === "calling" || step.dataset.status === "waiting") this.setStatus(step, "interrupted");
    }
    const node = this.notice("stopped", "Stopped: the reply above may be incomplete.");
    node.setAttribute("role", "note");
    return node;
  }
}

function promptText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .filter((item) => typeof item === "string" || !item?.attachment)
      .map((item) => (typeof item === "string" ? item : "[attachment]"))
      .join("\n");
  }
  return String(content ?? "");
}

/** The files a stored user prompt attaches, as the server annotated them. */
function attachmentsOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((item) => item && typeof item === "object" && item.attachment).map((item) => item.attachment);
}

/** The run of the thread's latest stored message (its id without the checkpoint's suffix). */
export function lastRunId(messages) {
  for (let index = messages.length - 1; index >= 0; index--) {
    if (messages[index].run_id) return runOf(messages[index].run_id);
  }
  return null;
}

export function parseArgs(args) {
  if (typeof args !== "string") return args ?? {};
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

