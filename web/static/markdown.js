// The model's replies as markdown: parsed by marked, sanitised by DOMPurify, then inserted.
//
// marked does not sanitise; DOMPurify removes scripts, event handlers and javascript: URLs from
// its output. Links open in a new tab without handing it this page (noopener, noreferrer).

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const marked = new Marked({ gfm: true, breaks: true, async: false });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const ALLOWED = {
  ALLOWED_TAGS: [
    "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
  ],
  ALLOWED_ATTR: ["href", "title", "target", "rel", "align"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};

/** Render `text` (markdown) into `node`, sanitised. */
export function renderMarkdown(node, text) {
  const html = marked.parse(text ?? "");
  node.replaceChildren(DOMPurify.sanitize(html, { ...ALLOWED, RETURN_DOM_FRAGMENT: true }));
}
