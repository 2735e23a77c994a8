// The inbox's rows: what each says about who wrote and what about. Every
// word a submission carries goes in through text.js (text nodes only).
//
// A structured submission's row is headed by its subject, with the name
// (and operator) its `from` gives, marked as the sender's own claim:
// Beacon does not record who submitted (no door's credential is kept
// with a submission), so no name is ever shown as checked. A text
// submission's row is headed by its first line, the rest its preview.

import { dig, element, size, stateWord, summary, when } from "./text.js";

const PREVIEW_LENGTH = 200;
// The white space a heading or preview folds (not JavaScript's \s, which
// would also take U+FEFF, which must show).
const SPACES = /[ \t\n\r\f\v]+/;
const BLANK = /^[ \t\r\f\v]*$/;

function folded(text, length) {
  const words = text.split(SPACES).filter(Boolean).join(" ");
  return words.length > length ? words.slice(0, length) + "\u2026" : words;
}

function submittedPart(task) {
  if (dig(task, "metadata", "purgedAt") != null) {
    return undefined;
  }
  return dig(task, "history", 0, "parts", 0);
}

// What a text submission says after its first line (folded, shortened),
// or "".
export function preview(task) {
  const text = dig(submittedPart(task), "text");
  if (typeof text !== "string") {
    return "";
  }
  const lines = text.split("\n");
  const first = lines.findIndex((line) => !BLANK.test(line));
  return first < 0 ? "" : folded(lines.slice(first + 1).join("\n"), PREVIEW_LENGTH);
}

// Who a structured submission says it is from: { name, operator } (either
// may be undefined), or undefined for any other submission.
export function sender(task) {
  const data = dig(submittedPart(task), "data");
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    return undefined;
  }
  const from = dig(data, "from");
  const text = (value) => (typeof value === "string" && !BLANK.test(value) ? folded(value, PREVIEW_LENGTH) : undefined);
  return { name: text(dig(from, "name")), operator: text(dig(from, "operator")) };
}

// The row's second line: the claimed sender, or the text's preview.
function byline(task) {
  const from = sender(task);
  if (from) {
    const line = element("span", "from");
    line.append(element("span", "claim", "claims to be"), " ");
    line.append(element("span", "name", from.name ?? "(no name)"));
    if (from.operator !== undefined) {
      line.append(" \u00B7 ", element("span", "operator", from.operator));
    }
    line.title = "The sender's own words: Beacon does not check who sent a submission.";
    return line;
  }
  const rest = preview(task);
  return rest ? element("span", "preview", rest) : undefined;
}

// One row of the inbox for `task`, its box ticked if `selected`.
export function rowOf(task, selected) {
  const id = String(task.id);
  const row = element("li", "row");
  row.dataset.id = id;
  const state = dig(task, "status", "state");
  row.dataset.state = typeof state === "string" ? state : "";

  const pick = document.createElement("input");
  pick.type = "checkbox";
  pick.className = "pick";
  pick.checked = selected;
  pick.setAttribute("aria-label", "Select for a bulk decision");
  row.append(pick);

  const open = element("button", "open");
  open.type = "button";
  open.append(element("span", "subject", summary(task)));
  const second = byline(task);
  if (second) {
    open.append(second);
  }
  row.append(open);

  const meta = element("span", "meta");
  const word = stateWord(state);
  meta.append(element("span", `state state-${word.replace(/[^a-z-]/g, "")}`, word));
  meta.append(element("time", "received", when(dig(task, "metadata", "receipt", "receivedAt"))));
  meta.append(element("span", "door", dig(task, "metadata", "door") ?? ""));
  meta.append(element("span", "size", size(dig(task, "metadata", "size"))));
  row.append(meta);
  row.classList.toggle("selected", selected);
  return row;
}
