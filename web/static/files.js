// Files on the page: attach (button, drag and drop, paste), the chips waiting to be sent, and the
// previews on a message (images inline, other files as a named chip with their size). Files are
// fetched with the token (an <img src> cannot carry it) and shown from blob URLs.

import { ApiError, token } from "./api.js";
import { byTestId, element } from "./dom.js";

const pending = []; // { file_id, name, media_type, size } uploaded, to go with the next message

/** A size in words: 812 B, 14 KB, 3.2 MB. */
export function sizeText(size) {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${Math.round(size / 1024)} KB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MB`;
}

export function pendingFiles() {
  return pending.slice();
}

export function clearPending() {
  pending.length = 0;
  renderPending();
}

/** Wire the attach button, the file input, dropping files on the composer and pasting images. */
export function wireAttachments({ threadId, onError }) {
  const input = byTestId("file-input");
  byTestId("attach").addEventListener("click", () => input.click());
  input.addEventListener("change", async () => {
    await uploadAll(threadId(), [...input.files], onError);
    input.value = "";
  });
  const zone = byTestId("composer");
  zone.addEventListener("dragover", (event) => {
    if (!event.dataTransfer?.types.includes("Files")) return;
    event.preventDefault();
    zone.classList.add("dropping");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dropping"));
  zone.addEventListener("drop", async (event) => {
    zone.classList.remove("dropping");
    const files = [...(event.dataTransfer?.files ?? [])];
    if (!files.length) return;
    event.preventDefault();
    await uploadAll(threadId(), files, onError);
  });
  byTestId("message-input").addEventListener("paste", async (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (!files.length) return; // text pastes as text
    event.preventDefault();
    await uploadAll(threadId(), files, onError);
  });
}

async function uploadAll(threadId, files, onError) {
  if (!threadId) return;
  for (const file of files) {
    try {
      pending.push(await upload(threadId, file));
    } catch (error) {
      onError(error);
    }
    renderPending();
  }
}

async function upload(threadId, file) {
  const form = new FormData();
  // A pasted image is often named "image.png"; keep whatever name the browser gives.
  form.append("file", file, file.name || "pasted");
  const response = await fetch(`/api/threads/${encodeURIComponent(threadId)}/files`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token()}` },
    body: form,
  });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, data?.error?.code ?? "http_error", data?.error?.message ?? response.statusText);
  }
  return data;
}

function renderPending() {
  const box = byTestId("pending-files");
  box.replaceChildren(
    ...pending.map((file, index) => {
      const chip = element("span", "file-chip", "pending-file", `${file.name} · ${sizeText(file.size)}`);
      const remove = element("button", "link", "remove-file", "×");
      remove.type = "button";
      remove.title = `Remove ${file.name}`;
      remove.addEventListener("click", () => {
        pending.splice(index, 1);
        renderPending();
      });
      chip.append(remove);
      return chip;
    }),
  );
  box.hidden = pending.length === 0;
}

/** The endpoint of a file of a thread. */
export function fileUrl(threadId, fileId) {
  return `/api/threads/${encodeURIComponent(threadId)}/files/${encodeURIComponent(fileId)}`;
}

/** A live `user_message` event's `attachments`, with the endpoint of each (`null` when none). */
export function eventAttachments(threadId, attachments) {
  if (!attachments?.length) return null;
  return attachments.map((file) => ({ ...file, url: fileUrl(threadId, file.file_id) }));
}

/** The previews of a message's attachments: `{file_id, name, media_type, size, removed?, url}` each. */
export function attachmentsNode(attachments) {
  const box = element("div", "attachments", "attachments");
  for (const file of attachments) {
    const url = file.url;
    if (file.removed) {
      box.append(element("span", "file-chip removed", "attachment", `${file.name} (removed)`));
    } else if (file.media_type?.startsWith("image/")) {
      const image = element("img", "attachment-image", "attachment-image");
      image.alt = file.name;
      box.append(image);
      fetchBlob(url).then((blob) => (image.src = URL.createObjectURL(blob)), () => (image.alt = `${file.name} (unavailable)`));
    } else {
      const chip = element("button", "file-chip", "attachment", `${file.name} · ${sizeText(file.size ?? 0)}`);
      chip.type = "button";
      chip.title = `Download ${file.name}`;
      chip.addEventListener("click", () => download(url, file.name));
      box.append(chip);
    }
  }
  return box;
}

async function fetchBlob(url) {
  const response = await fetch(url, { headers: { Authorization: `Bearer ${token()}` }, cache: "no-store" });
  if (!response.ok) throw new ApiError(response.status, "http_error", response.statusText);
  return response.blob();
}

async function download(url, name) {
  const blob = await fetchBlob(url);
  const link = element("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}
