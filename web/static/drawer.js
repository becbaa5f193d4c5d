// On a phone the thread list is a slide-out: a button opens it, the backdrop or Escape closes it.

import { byTestId } from "./dom.js";

export function openDrawer() {
  document.body.classList.add("drawer-open");
  byTestId("open-threads").setAttribute("aria-expanded", "true");
  byTestId("threads-backdrop").hidden = false;
  (document.querySelector('[data-testid="thread-item"][aria-current="true"]') ?? byTestId("new-thread")).focus();
}

export function closeDrawer() {
  if (!document.body.classList.contains("drawer-open")) return;
  document.body.classList.remove("drawer-open");
  byTestId("open-threads").setAttribute("aria-expanded", "false");
  byTestId("threads-backdrop").hidden = true;
}

export function wireDrawer() {
  byTestId("open-threads").addEventListener("click", () => {
    if (document.body.classList.contains("drawer-open")) closeDrawer();
    else openDrawer();
  });
  byTestId("threads-backdrop").addEventListener("click", closeDrawer);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("drawer-open")) {
      closeDrawer();
      byTestId("open-threads").focus();
    }
  });
}
