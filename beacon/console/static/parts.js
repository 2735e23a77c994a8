// One part of a submission's message, as the page shows it opened: a
// text as preformatted text, structured data as a table of its fields in
// the schema's order, anything else described, never fetched. Every word
// goes in through text.js (text nodes only).

import { element, flatten, size } from "./text.js";

// A structured submission's fields in the order its schema gives them
// (the answer's JSON has them sorted by name), any others after.
const SCHEMA_ORDER = ["from", "subject", "language", "body", "contact"];
const FROM_ORDER = ["name", "agent", "operator"];

function inSchemaOrder(data, order = SCHEMA_ORDER) {
  const ordered = Object.create(null); // a key "__proto__" stays a key
  for (const key of order) {
    if (Object.hasOwn(data, key)) {
      ordered[key] = data[key];
    }
  }
  for (const key of Object.keys(data)) {
    if (!Object.hasOwn(ordered, key)) {
      ordered[key] = data[key];
    }
  }
  const from = ordered.from;
  if (order === SCHEMA_ORDER && from !== null && typeof from === "object" && !Array.isArray(from)) {
    ordered.from = inSchemaOrder(from, FROM_ORDER);
  }
  return ordered;
}

export function renderPart(part) {
  const box = element("div", "part");
  if (typeof part?.text === "string") {
    box.append(element("pre", "text", part.text));
    return box;
  }
  if (part && "data" in part) {
    const data = part.data;
    if (data !== null && typeof data === "object") {
      const table = element("table", "data");
      const head = element("thead");
      const headRow = element("tr");
      headRow.append(element("th", "", "field"), element("th", "", "value"));
      head.append(headRow);
      const body = element("tbody");
      for (const [name, value] of flatten(inSchemaOrder(data))) {
        const tr = element("tr");
        const th = element("th", "", name);
        th.scope = "row";
        tr.append(th, element("td", "value", value));
        body.append(tr);
      }
      table.append(head, body);
      box.append(element("p", "muted", "Structured data"), table);
    } else {
      box.append(element("pre", "text", JSON.stringify(data)));
    }
    return box;
  }
  // A file, a URL or raw bytes: described, never fetched or linked.
  const what = [];
  for (const key of ["mediaType", "filename"]) {
    if (typeof part?.[key] === "string") {
      what.push(`${key} ${part[key]}`);
    }
  }
  if (typeof part?.raw === "string") {
    what.push(`${size(Math.floor(part.raw.length * 3 / 4))} of bytes`);
  }
  if (typeof part?.url === "string") {
    what.push(`a URL (not opened): ${part.url}`);
  }
  box.append(element("p", "muted", `A part this console does not show${what.length ? ": " + what.join(", ") : ""}.`));
  return box;
}
