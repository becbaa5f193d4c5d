// The thread's header: rename, delete (with a confirmation) and the records view.

import { ApiError, api, plainError } from "./api.js";
import { byTestId, element, fieldList, formatTime } from "./dom.js";

/**
 * Wire the header's controls. `hooks`: `threadId()`, `title()`, `setTitle(title)`,
 * `notify(text)`, `onDeleted(threadId)`.
 */
export function wireHeader(hooks) {
  byTestId("rename").addEventListener("click", () => startRename(hooks));
  byTestId("rename-form").addEventListener("submit", (event) => {
    event.preventDefault();
    saveRename(hooks);
  });
  byTestId("cancel-rename").addEventListener("click", () => {
    byTestId("rename-form").hidden = true;
    byTestId("rename").focus();
  });
  byTestId("rename-input").addEventListener("keydown", (event) => {
    if (event.key === "Escape") byTestId("cancel-rename").click();
  });
  byTestId("delete").addEventListener("click", () => {
    byTestId("confirm-delete").hidden = false;
    byTestId("confirm-delete-no").focus();
  });
  byTestId("confirm-delete-yes").addEventListener("click", () => deleteThread(hooks));
  byTestId("confirm-delete-no").addEventListener("click", () => {
    byTestId("confirm-delete").hidden = true;
    byTestId("delete").focus();
  });
  byTestId("records-button").addEventListener("click", () => toggleRecords(hooks));
}

function startRename(hooks) {
  byTestId("rename-form").hidden = false;
  const input = byTestId("rename-input");
  input.value = hooks.title();
  input.select();
  input.focus();
}

async function saveRename(hooks) {
  const title = byTestId("rename-input").value.trim();
  if (!title) return;
  try {
    const thread = await api("PATCH", `/api/threads/${encodeURIComponent(hooks.threadId())}`, { title });
    hooks.setTitle(thread.title);
    byTestId("rename-form").hidden = true;
    byTestId("rename").focus();
  } catch (error) {
    hooks.notify(plainError(error));
  }
}

async function deleteThread(hooks) {
  const threadId = hooks.threadId();
  byTestId("confirm-delete").hidden = true;
  try {
    await api("DELETE", `/api/threads/${encodeURIComponent(threadId)}`);
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) {
      hooks.notify(plainError(error));
      return;
    }
  }
  hooks.onDeleted(threadId);
}

export function hideRecords() {
  byTestId("records-panel").hidden = true;
  byTestId("records-button").setAttribute("aria-expanded", "false");
}

async function toggleRecords(hooks) {
  const panel = byTestId("records-panel");
  if (!panel.hidden) return hideRecords();
  panel.replaceChildren(element("p", "muted", null, "Loading records…"));
  panel.hidden = false;
  byTestId("records-button").setAttribute("aria-expanded", "true");
  try {
    const data = await api("GET", `/api/threads/${encodeURIComponent(hooks.threadId())}/records`);
    panel.replaceChildren(element("h3", null, null, "Records saved in this conversation"));
    if (!data.records?.length) panel.append(element("p", "muted", "no-records", "No records yet: tools save them as they run (feedback, for one)."));
    for (const record of data.records ?? []) panel.append(recordView(record));
  } catch (error) {
    panel.replaceChildren(element("p", "error", null, plainError(error)));
  }
}

function recordView(record) {
  const item = element("article", "record", "record");
  const heading = element("h4", null, "record-kind", record.kind);
  heading.append(" ", element("span", "muted", null, `· ${formatTime(record.created_at)}`));
  item.append(heading, fieldList(record.data));
  return item;
}
