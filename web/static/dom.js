// Small DOM helpers shared by the page's modules.

export const byTestId = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

/** A new element with an optional class, test id and text (always set as text, never as HTML). */
export function element(tag, className, testId, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (testId) node.dataset.testid = testId;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

export function button(label, className, testId) {
  const node = element("button", className, testId, label);
  node.type = "button";
  return node;
}

export function row(...children) {
  const node = element("div", "actions");
  node.append(...children);
  return node;
}

/** A `<time>` for an ISO timestamp (or a Date): the hour today, the day otherwise, the whole moment as its title. */
export function timeElement(when, testId = "timestamp") {
  const date = when instanceof Date ? when : new Date(when);
  const node = element("time", "time", testId);
  if (Number.isNaN(date.getTime())) return node;
  node.dateTime = date.toISOString();
  node.textContent = formatTime(date);
  node.title = date.toLocaleString();
  return node;
}

export function formatTime(when) {
  const date = when instanceof Date ? when : new Date(when);
  if (Number.isNaN(date.getTime())) return "";
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString([], { month: "short", day: "numeric" });
}

export function compactJson(value) {
  try {
    return typeof value === "string" ? value : JSON.stringify(value);
  } catch {
    return String(value);
  }
}

export function prettyJson(value) {
  try {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A value of a JSON object's field as one line of text: lists of plain values joined, anything nested as JSON. */
export function fieldText(value) {
  if (value === null || value === undefined) return "—";
  if (Array.isArray(value) && value.every((item) => item === null || typeof item !== "object")) return value.join(", ");
  if (typeof value === "object") return compactJson(value);
  return String(value);
}

/** A JSON object as a definition list: each field's name, then its value as text (never as HTML). */
export function fieldList(fields, className, testId) {
  const list = element("dl", className, testId);
  for (const [key, value] of Object.entries(fields ?? {})) {
    list.append(element("dt", null, null, key), element("dd", null, null, fieldText(value)));
  }
  return list;
}

/** Copy `text` to the clipboard, then say so on `node` for a moment. */
export async function copyText(text, node) {
  const label = node.textContent;
  try {
    await navigator.clipboard.writeText(text);
    node.textContent = "Copied";
  } catch {
    node.textContent = "Copy failed";
  }
  node.dataset.copied = "true";
  setTimeout(() => {
    node.textContent = label;
    delete node.dataset.copied;
  }, 1500);
}

/** A thread's title from its first message, as the server makes it (`store.threads.title_from`). */
export function titleFrom(content) {
  const limit = 60;
  const text = content.split(/\s+/).filter(Boolean).join(" ");
  if (text.length <= limit) return text;
  let cut = text.slice(0, limit - 1);
  if (text[cut.length] !== " " && cut.slice(limit / 2).includes(" ")) cut = cut.slice(0, cut.lastIndexOf(" "));
  return `${cut.replace(/[ .,;:]+$/, "")}…`;
}
