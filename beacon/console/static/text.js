// Stranger text made into DOM nodes, and the words the page shows for
// Beacon's values. Everything a submission carries goes into the page
// through these functions: text nodes only (never HTML), with invisible
// and direction-changing characters shown as visible marks.

// C0 and C1 controls but tab and newline, zero-width and direction marks,
// embeddings and overrides, line and paragraph separators, invisible
// operators, isolates, the byte order mark.
const HIDDEN = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]/g;

function codePoint(character) {
  return "U+" + character.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
}

// A fragment holding `value` as text, every hidden character replaced by
// a <span class="ctl"> saying which it is (⟨U+202E⟩).
export function inert(value) {
  const fragment = document.createDocumentFragment();
  const text = typeof value === "string" ? value : value == null ? "" : JSON.stringify(value);
  let start = 0;
  for (const match of text.matchAll(HIDDEN)) {
    if (match.index > start) {
      fragment.append(document.createTextNode(text.slice(start, match.index)));
    }
    const mark = document.createElement("span");
    mark.className = "ctl";
    mark.textContent = "\u27E8" + codePoint(match[0]) + "\u27E9";
    fragment.append(mark);
    start = match.index + match[0].length;
  }
  if (start < text.length) {
    fragment.append(document.createTextNode(text.slice(start)));
  }
  return fragment;
}

// A new element `tag` with class `className` holding `value` as inert text.
export function element(tag, className, value) {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (value !== undefined) {
    node.append(inert(value));
  }
  return node;
}

// What `path` (keys and indexes) leads to in `value`, or undefined.
export function dig(value, ...path) {
  for (const key of path) {
    if (value === null || typeof value !== "object") {
      return undefined;
    }
    value = value[key];
  }
  return value;
}

const TIMESTAMP = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z$/;

// An RFC 3339 UTC timestamp as "2026-11-30 04:29:55Z" (as `beacon review` shows it).
export function when(timestamp) {
  const match = typeof timestamp === "string" ? TIMESTAMP.exec(timestamp) : null;
  return match ? `${match[1]} ${match[2]}Z` : typeof timestamp === "string" ? timestamp : "";
}

const STATE_WORDS = {
  TASK_STATE_SUBMITTED: "undecided",
  TASK_STATE_COMPLETED: "accepted",
  TASK_STATE_REJECTED: "rejected",
};

// TASK_STATE_COMPLETED as "accepted", and so on.
export function stateWord(state) {
  if (typeof state !== "string") {
    return "?";
  }
  if (state in STATE_WORDS) {
    return STATE_WORDS[state];
  }
  return state.replace(/^TASK_STATE_/, "").toLowerCase().replace(/_/g, "-");
}

// A size in bytes, readably.
export function size(bytes) {
  if (typeof bytes !== "number" || !Number.isFinite(bytes)) {
    return "";
  }
  if (bytes < 1024) {
    return `${bytes} B`;
  }
  if (bytes < 1024 * 1024) {
    return `${(bytes / 1024).toFixed(1)} KiB`;
  }
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

// The number `n` with `word`, pluralised.
export function plural(n, word) {
  return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}

const SUMMARY_LENGTH = 300;

// A task's subject, or the first non-empty line of its text, shortened.
export function summary(task) {
  if (dig(task, "metadata", "purgedAt") != null) {
    return "(content purged)";
  }
  const parts = dig(task, "history", 0, "parts");
  let found = "";
  for (const part of Array.isArray(parts) ? parts : []) {
    const subject = dig(part, "data", "subject");
    if (typeof subject === "string" && /[^ \t\n\r\f\v]/.test(subject)) {
      found = subject;
      break;
    }
    const text = dig(part, "text");
    if (typeof text === "string") {
      const line = text.split("\n").find((l) => /[^ \t\r\f\v]/.test(l));
      if (line) {
        found = line;
        break;
      }
    }
  }
  // Runs of spaces, tabs and line ends become one space; nothing else
  // goes (JavaScript's \s would also drop U+FEFF, which must show).
  found = found.split(/[ \t\n\r\f\v]+/).filter(Boolean).join(" ");
  if (!found) {
    return "(no text)";
  }
  return found.length > SUMMARY_LENGTH ? found.slice(0, SUMMARY_LENGTH) + "\u2026" : found;
}

// The review extension's record of a decision in a status message.
export function decisionOf(status) {
  const metadata = dig(status, "message", "metadata");
  if (metadata && typeof metadata === "object") {
    for (const value of Object.values(metadata)) {
      if (value && typeof value === "object" && typeof value.decision === "string") {
        const note = value.hasNote === true ? dig(status, "message", "parts", 0, "text") : undefined;
        return { decision: value.decision, note: typeof note === "string" ? note : undefined };
      }
    }
  }
  return undefined;
}

// Every (field, value) pair of a structured part's data, flattened: nested
// objects as "from.name", lists as "contact[0].value".
export function flatten(value, prefix = "", into = []) {
  if (Array.isArray(value)) {
    if (value.length === 0) {
      into.push([prefix, "[]"]);
    }
    value.forEach((item, index) => flatten(item, `${prefix}[${index}]`, into));
  } else if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (keys.length === 0) {
      into.push([prefix, "{}"]);
    }
    for (const key of keys) {
      flatten(value[key], prefix ? `${prefix}.${key}` : key, into);
    }
  } else {
    into.push([prefix, typeof value === "string" ? value : JSON.stringify(value)]);
  }
  return into;
}
