// The thread list's items: one button per thread, the open one marked.

import { button, element, formatTime } from "./dom.js";
import { statusLabel } from "./status.js";

/** The list item of `thread`; `onSelect(threadId)` opens it. */
export function threadItem(thread, onSelect) {
  const li = document.createElement("li");
  const item = button(null, "thread-item", "thread-item");
  item.dataset.threadId = thread.thread_id;
  const meta = element("span", `thread-meta status-${thread.status}`);
  meta.textContent = `${statusLabel(thread.status)} · ${formatTime(thread.updated_at)}`;
  item.append(element("span", "thread-name", null, thread.title || "New chat"), meta);
  item.addEventListener("click", () => onSelect(thread.thread_id));
  li.append(item);
  return li;
}

export function listItem(threadId) {
  return document.querySelector(`[data-testid="thread-item"][data-thread-id="${CSS.escape(threadId)}"]`);
}

/** Mark the item of `threadId` as the open one (none: no thread is open). */
export function markSelected(threadId) {
  for (const item of document.querySelectorAll('[data-testid="thread-item"]')) {
    if (item.dataset.threadId === threadId) item.setAttribute("aria-current", "true");
    else item.removeAttribute("aria-current");
  }
}
