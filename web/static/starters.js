// Starter prompts: what the app suggests asking, offered in the empty states.

import { button, element } from "./dom.js";

/** Fill `container` with a button per prompt (once per set of prompts); `onPick(prompt)` on a click. */
export function fillStarters(container, prompts, onPick) {
  if (container.dataset.filled === String(prompts.length)) return;
  container.dataset.filled = String(prompts.length);
  container.replaceChildren();
  if (!prompts.length) return;
  container.append(element("p", "starters-title", null, "Try asking:"));
  for (const prompt of prompts) {
    const pick = button(prompt, "starter", "starter-prompt");
    pick.addEventListener("click", () => onPick(prompt));
    container.append(pick);
  }
}
