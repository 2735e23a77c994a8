// Beacon's web console: the inbox, one submission, bulk decisions, live
// arrivals and the keys. Submission content only ever reaches the page as
// text (text.js; a row through rows.js, an opened part through parts.js);
// every request goes to this page's own origin (api.js).

import { APIError, get, post, taskPath } from "./api.js";
import { renderPart } from "./parts.js";
import { rowOf } from "./rows.js";
import { PANE, layout, nextUndecided, startTriage } from "./triage.js";
import {
  decisionOf, dig, element, inert, plural, size, stateWord, summary, when,
} from "./text.js";

const PAGE_SIZE = 50;
const TITLE = "Beacon inbox";
const DOWN_TEXT = "Beacon is not answering; reconnecting\u2026";
const CONSOLE_DOWN_TEXT = "The console is not answering; reconnecting\u2026";
const ENDED_TEXT = "Live updates stopped: the console refused the event stream (the session"
  + " ended, or too many pages are open). Reload the page to try again.";

const $ = (id) => document.getElementById(id);

const view = {
  tasks: [],            // the loaded rows, in order
  nextPageToken: "",
  query: {},            // the filters and sort the rows were loaded with
  total: null,
  totalMoreThan: null,
  current: -1,          // the row j/k move, o opens
  selected: new Set(),  // ids chosen for a bulk decision
  matching: false,      // the selection is "every undecided one matching"
  confirming: [],       // the ids the bulk dialog asks about
  openId: null,         // the submission shown, if any
  openTask: null,
  pending: null,        // "accept" or "reject" once a or r was pressed
  newCount: 0,          // live arrivals since the page was focused or refreshed
  unseen: 0,            // live arrivals the current filters may not show
  beaconDown: false,
  generation: 0,        // drops answers to superseded list requests
  heard: null,          // live events heard while a fresh list is on its way
};

// Messages.

function say(text, kind = "info") {
  const status = $("status");
  status.replaceChildren(inert(text));
  status.dataset.kind = kind;
  status.hidden = !text;
}

function failed(error) {
  say(error instanceof APIError ? error.message : String(error), "error");
}

function setTitle() {
  document.title = view.newCount > 0 ? `(${view.newCount}) ${TITLE}` : TITLE;
}

function banner(text) {
  const node = $("banner");
  node.textContent = text || "";
  node.hidden = !text;
}

// The filters.

function queryOfForm() {
  const query = {};
  const search = $("search").value.trim();
  if (search) {
    query.search = search;
  }
  // Each key as the operator API names its param (status, not the
  // control's id "state").
  for (const [name, key] of [["state", "status"], ["door", "door"], ["since", "since"], ["until", "until"]]) {
    const value = $(name).value;
    if (value) {
      query[key] = value;
    }
  }
  query.sort = $("sort").value || "received";
  return query;
}

// The filters' choices: Beacon's own lists (GET /api/choices), each
// under the "any" the page starts with; data-ready on a select once filled.
async function loadChoices() {
  const choices = await get("/api/choices");
  for (const [id, key, word] of [["state", "states", stateWord], ["door", "doors", String]]) {
    const select = $(id);
    const values = Array.isArray(choices?.[key]) ? choices[key] : [];
    const options = values.filter((v) => typeof v === "string").map((value) => {
      const option = element("option", "", word(value));
      option.value = value;
      return option;
    });
    select.replaceChildren(select.options[0], ...options);
    select.dataset.ready = "true";
  }
}

function filtersOnly(query) {
  const filters = { ...query };
  delete filters.sort;
  return filters;
}

// The inbox.

function rowFor(task) {
  return rowOf(task, view.selected.has(String(task.id)));
}

function renderList() {
  const list = $("inbox");
  list.replaceChildren(...view.tasks.map(rowFor));
  $("empty").hidden = view.tasks.length > 0;
  $("empty").textContent = Object.keys(filtersOnly(view.query)).length
    ? "No submissions match."
    : "No submissions.";
  $("more").hidden = !view.nextPageToken;
  markCurrent(false);
  renderTotal();
  renderSelection();
}

function renderTotal() {
  const shown = view.tasks.length;
  const total = typeof view.total === "number" ? view.total : null;
  const moreThan = typeof view.totalMoreThan === "number" ? view.totalMoreThan : null;
  $("total").textContent = total !== null
    ? `${shown.toLocaleString("en")} of ${plural(total, "submission")}`
    : moreThan !== null
      ? `${shown.toLocaleString("en")} of more than ${plural(moreThan, "submission")}`
      : plural(shown, "submission") + " shown";
}

function replaceRow(task) {
  const index = view.tasks.findIndex((t) => t.id === task.id);
  if (index < 0) {
    return;
  }
  view.tasks[index] = task;
  const old = $("inbox").children[index];
  if (old) {
    const fresh = rowFor(task);
    old.replaceWith(fresh);
    markCurrent(false);
  }
}

async function load(reset) {
  const generation = ++view.generation;
  // A fresh list may have been read before a submission or decision that
  // is heard live while it is on its way: what is heard meanwhile is kept
  // and applied again to the list once it is shown.
  view.heard = reset ? { generation, events: [] } : null;
  const query = reset ? queryOfForm() : view.query;
  const params = { ...query, pageSize: String(PAGE_SIZE) };
  if (!reset) {
    params.pageToken = view.nextPageToken;
  }
  $("inbox").setAttribute("aria-busy", "true");
  try {
    const page = await get("/api/tasks", params);
    if (generation !== view.generation) {
      return;
    }
    const tasks = Array.isArray(page?.tasks) ? page.tasks : [];
    if (reset) {
      view.query = query;
      view.tasks = tasks;
      view.current = tasks.length ? 0 : -1;
      view.newCount = 0;
      view.unseen = 0;
      renderArrivals();
      setTitle();
      view.total = typeof page?.totalSize === "number" ? page.totalSize : null;
      view.totalMoreThan = typeof page?.totalMoreThan === "number" ? page.totalMoreThan : null;
      if (!view.beaconDown) {
        say("");
      }
    } else {
      const known = new Set(view.tasks.map((t) => t.id));
      view.tasks.push(...tasks.filter((t) => !known.has(t.id)));
    }
    view.nextPageToken = typeof page?.nextPageToken === "string" ? page.nextPageToken : "";
    renderList();
    if (reset) {
      const events = view.heard?.generation === generation ? view.heard.events : [];
      view.heard = null;
      for (const [apply, payload] of events) {
        apply(payload);
      }
    }
  } catch (error) {
    if (generation === view.generation) {
      view.heard = null;
      failed(error);
    }
  } finally {
    if (generation === view.generation) {
      $("inbox").removeAttribute("aria-busy");
    }
  }
}

// The cursor (j/k).

function rows() {
  return $("inbox").children;
}

function markCurrent(focus) {
  const all = rows();
  for (let i = 0; i < all.length; i++) {
    const here = i === view.current;
    all[i].classList.toggle("current", here);
    if (here) {
      all[i].setAttribute("aria-current", "true");
    } else {
      all[i].removeAttribute("aria-current");
    }
  }
  const row = all[view.current];
  if (row && focus) {
    row.querySelector(".open").focus();
    row.scrollIntoView({ block: "nearest" });
  }
}

async function move(step) {
  if (!view.tasks.length) {
    return;
  }
  let index = view.current < 0 ? 0 : view.current + step;
  if (index >= view.tasks.length && view.nextPageToken) {
    await load(false);
  }
  index = Math.max(0, Math.min(view.tasks.length - 1, index));
  view.current = index;
  markCurrent(true);
}

// Selection and bulk decisions.

function renderSelection() {
  const count = view.selected.size;
  $("selected-count").textContent = count === 0
    ? "None selected"
    : `${count.toLocaleString("en")} selected` + (view.matching ? " (every undecided one matching)" : "");
  $("bulk-accept").disabled = count === 0;
  $("bulk-reject").disabled = count === 0;
  $("select-none").disabled = count === 0;
  $("bulk").dataset.some = String(count > 0);
  const picks = [...document.querySelectorAll("#inbox .pick")];
  for (const pick of picks) {
    const row = pick.closest(".row");
    pick.checked = view.selected.has(row.dataset.id);
    row.classList.toggle("selected", pick.checked);
  }
  const page = $("select-page");
  page.checked = picks.length > 0 && picks.every((p) => p.checked);
  page.indeterminate = !page.checked && picks.some((p) => p.checked);
}

function toggle(id, on) {
  if (on ?? !view.selected.has(id)) {
    view.selected.add(id);
  } else {
    view.selected.delete(id);
  }
  view.matching = false;
  renderSelection();
}

async function selectMatching() {
  try {
    const answer = await get("/api/matching", filtersOnly(view.query));
    const ids = Array.isArray(answer?.ids) ? answer.ids.map(String) : [];
    view.selected = new Set(ids);
    view.matching = true;
    renderSelection();
    if (answer?.complete === false) {
      say(`More match than one bulk decision takes; selected the first ${plural(ids.length, "submission")}.`);
    } else {
      say(ids.length
        ? `Selected every undecided submission matching: ${plural(ids.length, "submission")}.`
        : "No undecided submission matches.");
    }
  } catch (error) {
    failed(error);
  }
}

// The selected ids, split: those to decide (undecided, or not on the
// list, as every one "select all matching" took is) and those already
// decided, which a bulk decision leaves as they are.
function selectedByState() {
  const states = new Map(view.tasks.map((t) => [String(t.id), dig(t, "status", "state")]));
  const undecided = [];
  const decided = [];
  for (const id of view.selected) {
    const state = states.get(id);
    (state === undefined || state === "TASK_STATE_SUBMITTED" ? undecided : decided).push(id);
  }
  return { undecided, decided };
}

function confirmBulk(decision) {
  if (!view.selected.size) {
    return;
  }
  const { undecided, decided } = selectedByState();
  const verb = decision === "accept" ? "Accept" : "Reject";
  const dialog = $("confirm");
  dialog.dataset.decision = decision;
  $("confirm-verb").textContent = verb;
  $("confirm-count").textContent = `${plural(undecided.length, "undecided submission")}?`;
  const left = $("confirm-decided");
  left.textContent = decided.length === 1
    ? "1 already decided is left as it is."
    : `${decided.length.toLocaleString("en")} already decided are left as they are.`;
  left.hidden = decided.length === 0;
  $("confirm-ok").textContent = `${verb} ${plural(undecided.length, "submission")}`;
  $("confirm-ok").className = decision;
  $("confirm-ok").disabled = undecided.length === 0;
  view.confirming = undecided;
  $("confirm-note").value = "";
  dialog.returnValue = "";
  dialog.showModal();
  $("confirm-cancel").focus();
}

// Decide on `ids` (those the dialog counted): Beacon says which were
// decided meanwhile.
async function decideMany(decision, note, ids) {
  if (!ids.length) {
    return;
  }
  say(`Deciding on ${plural(ids.length, "submission")}\u2026`);
  try {
    const answer = await post("/api/decide-many", note ? { ids, decision, note } : { ids, decision });
    const count = (name) => (Array.isArray(answer?.[name]) ? answer[name].length : 0);
    const words = [
      `${decision === "accept" ? "Accepted" : "Rejected"} ${count("decided").toLocaleString("en")}`,
      `${count("alreadyDecided").toLocaleString("en")} already decided`,
    ];
    if (count("notFound")) {
      words.push(`${count("notFound").toLocaleString("en")} not found`);
    }
    if (count("failed")) {
      words.push(`${count("failed").toLocaleString("en")} failed`);
    }
    view.selected.clear();
    view.matching = false;
    await load(true);
    say(words.join("; ") + ".", count("failed") ? "error" : "info");
    $("status").dataset.decided = String(count("decided"));
    $("status").dataset.alreadyDecided = String(count("alreadyDecided"));
  } catch (error) {
    failed(error);
  }
}

// One submission.

function field(list, name, value, className) {
  list.append(element("dt", "", name));
  const dd = element("dd", className || "", value);
  list.append(dd);
  return dd;
}

function renderDetail(task) {
  view.openTask = task;
  $("detail-subject").replaceChildren(inert(summary(task)));
  const fields = $("fields");
  fields.replaceChildren();
  const status = dig(task, "status");
  const state = dig(status, "state");
  field(fields, "State", `${stateWord(state)} since ${when(dig(status, "timestamp"))}`, "state-field");
  const receipt = dig(task, "metadata", "receipt");
  field(fields, "Received", when(dig(receipt, "receivedAt")));
  field(fields, "Door", dig(task, "metadata", "door") ?? "");
  field(fields, "Source", dig(task, "metadata", "source") ?? "");
  field(fields, "Kind", dig(task, "metadata", "kind") ?? "");
  field(fields, "Size", size(dig(task, "metadata", "size")));
  field(fields, "Receipt", `${dig(receipt, "id") ?? ""}\nsha256 ${dig(receipt, "sha256") ?? ""}`, "mono");
  field(fields, "Context", dig(task, "contextId") ?? "", "mono");

  const content = $("content");
  content.replaceChildren();
  const purged = dig(task, "metadata", "purgedAt");
  if (purged != null) {
    content.append(element("p", "muted", `Content purged ${when(purged)} (receipt, times and state kept).`));
  }
  const history = Array.isArray(task.history) ? task.history : [];
  for (const message of history) {
    if (dig(message, "role") === "ROLE_AGENT") {
      continue;
    }
    for (const part of Array.isArray(message?.parts) ? message.parts : []) {
      content.append(renderPart(part));
    }
  }
  if (!content.children.length) {
    content.append(element("p", "muted", "(no content)"));
  }

  const decided = decisionOf(status);
  const undecided = state === "TASK_STATE_SUBMITTED";
  const decision = $("decision");
  decision.replaceChildren();
  if (undecided) {
    decision.append(inert("Undecided."));
  } else {
    decision.append(inert(`${stateWord(state)[0].toUpperCase()}${stateWord(state).slice(1)} ${when(dig(status, "timestamp"))}.`));
    if (decided?.note !== undefined) {
      decision.append(element("span", "note-label", " Note: "), element("q", "note", decided.note));
    }
  }
  decision.dataset.state = typeof state === "string" ? state : "";
  $("decide-form").hidden = !undecided;
  if (!undecided) {
    cancelPending();
  }
  const index = view.tasks.findIndex((t) => t.id === task.id);
  $("previous").disabled = index <= 0;
  $("next").disabled = index < 0 || (index >= view.tasks.length - 1 && !view.nextPageToken);
}

async function showDetail(id) {
  view.openId = id;
  // data-loaded names the submission once its whole answer is shown.
  delete $("detail-view").dataset.loaded;
  layout(true);
  const index = view.tasks.findIndex((t) => t.id === id);
  if (index >= 0) {
    view.current = index;
    // Beside the pane (a wide screen), the list marks the one open.
    markCurrent(false);
    if (PANE.matches) {
      rows()[index]?.scrollIntoView({ block: "nearest" });
    }
  }
  const known = view.tasks[index];
  if (known && !(view.openTask && view.openTask.id === id)) {
    renderDetail(known);
  }
  try {
    const task = await get(taskPath(id));
    if (view.openId !== id) {
      return;
    }
    renderDetail(task);
    replaceRow(task);
    $("detail-view").dataset.loaded = id;
  } catch (error) {
    failed(error);
  }
}

function showList(focus) {
  const wasOpen = view.openId !== null;
  view.openId = null;
  view.openTask = null;
  cancelPending();
  layout(false);
  // Back from a submission, the focus returns to its row; not on load.
  markCurrent(wasOpen || focus === true);
}

// Routes: #/task/ID shows one submission; anything else the inbox.

function route() {
  const match = /^#\/task\/([^/]+)$/.exec(location.hash);
  if (match) {
    return showDetail(decodeURIComponent(match[1]));
  }
  showList(false);
  return undefined;
}

function go(id, replace = false) {
  const url = id ? `#/task/${encodeURIComponent(id)}` : location.pathname;
  if (replace) {
    history.replaceState(null, "", url);
  } else {
    history.pushState(null, "", url);
  }
  const shown = route();
  if (id) {
    $("detail-subject").focus();
  }
  return shown;
}

async function step(by) {
  const index = view.tasks.findIndex((t) => t.id === view.openId);
  if (index < 0) {
    return;
  }
  if (index + by >= view.tasks.length && view.nextPageToken) {
    await load(false);
  }
  const target = view.tasks[index + by];
  if (target) {
    await go(target.id, true);
  }
}

function beginPending(decision) {
  if (!view.openTask) {
    return;
  }
  if (dig(view.openTask, "status", "state") !== "TASK_STATE_SUBMITTED") {
    say("This submission is already decided.");
    return;
  }
  view.pending = decision;
  $("decide-form").dataset.pending = decision;
  $("pending").textContent = decision === "accept"
    ? "Accept? Ctrl+Enter accepts (final); Escape cancels."
    : "Reject? Ctrl+Enter rejects (final); Escape cancels.";
  $("note").focus();
}

function cancelPending() {
  view.pending = null;
  delete $("decide-form").dataset.pending;
  $("pending").textContent = "";
}

async function decide(decision) {
  const id = view.openId;
  if (!id) {
    return;
  }
  const note = $("note").value;
  for (const button of [$("accept"), $("reject")]) {
    button.disabled = true;
  }
  try {
    const task = await post(`${taskPath(id)}/decide`, note ? { decision, note } : { decision });
    cancelPending();
    $("note").value = "";
    replaceRow(task);
    const word = decision === "accept" ? "Accepted" : "Rejected";
    // Then the next undecided submission in the list's order, if any.
    const index = view.tasks.findIndex((t) => t.id === id);
    let next = index < 0 ? -1 : nextUndecided(view.tasks, index);
    if (index >= 0 && next < 0 && view.nextPageToken) {
      await load(false);
      next = nextUndecided(view.tasks, index);
    }
    if (view.openId !== id) {
      say(`${word}.`);
    } else if (next >= 0) {
      say(`${word}; the next undecided submission is open.`);
      await go(view.tasks[next].id, true);
    } else {
      renderDetail(task);
      $("decision").focus();
      say(`${word}. No undecided submission follows in this list.`);
    }
  } catch (error) {
    failed(error);
    if (error instanceof APIError && error.status === 409 && view.openId === id) {
      showDetail(id);
    }
  } finally {
    for (const button of [$("accept"), $("reject")]) {
      button.disabled = false;
    }
  }
}

// Live arrivals and decisions, relayed from beacon.inbox.Follow.

function renderArrivals() {
  $("arrivals").hidden = view.unseen === 0;
  $("arrivals-text").textContent = view.unseen
    ? `${plural(view.unseen, "new submission")} may match your filters.`
    : "";
}

function shownByFilters(task) {
  const query = view.query;
  if (query.search || query.since || query.until) {
    return undefined; // the server knows; say so instead of guessing
  }
  if (query.status && query.status !== "submitted" && query.status !== "TASK_STATE_SUBMITTED") {
    return false;
  }
  if (query.door && query.door !== dig(task, "metadata", "door")) {
    return false;
  }
  return true;
}

// A live event: applied now, and kept if a fresh list is on its way (see
// load).
function hear(apply, payload) {
  if (view.heard?.generation === view.generation) {
    view.heard.events.push([apply, payload]);
  }
  apply(payload);
}

function arrived(task) {
  if (!task || typeof task.id !== "string" || view.tasks.some((t) => t.id === task.id)) {
    return;
  }
  view.newCount += 1;
  setTitle();
  const shown = shownByFilters(task);
  if (shown === true) {
    view.tasks.unshift(task);
    if (typeof view.total === "number") {
      view.total += 1;
    }
    const row = rowFor(task);
    row.classList.add("new");
    $("inbox").prepend(row);
    $("empty").hidden = true;
    if (view.current >= 0) {
      view.current += 1;
    } else {
      view.current = 0;
    }
    markCurrent(false);
    renderTotal();
    renderSelection();
  } else if (shown === undefined) {
    view.unseen += 1;
    renderArrivals();
  }
}

function updated(update) {
  const id = update?.taskId;
  const known = view.tasks.find((t) => t.id === id);
  if (known && update.status) {
    replaceRow({ ...known, status: update.status });
  }
  if (id && id === view.openId && view.openTask) {
    renderDetail({ ...view.openTask, status: update.status });
  }
}

// The live stream's state, for people (the banner) and for tests (a data
// attribute on <html>: "connecting", "ready", "down", "ended").
function liveState(state) {
  document.documentElement.dataset.events = state;
}

function listen() {
  liveState("connecting");
  const events = new EventSource("/api/events");
  events.addEventListener("ready", () => {
    liveState("ready");
    const wasDown = view.beaconDown;
    view.beaconDown = false;
    banner("");
    if (wasDown) {
      say("");
      load(true);
      if (view.openId) {
        showDetail(view.openId);
      }
    }
  });
  events.addEventListener("down", () => {
    liveState("down");
    view.beaconDown = true;
    banner(DOWN_TEXT);
  });
  events.addEventListener("task", (event) => {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    if (data && typeof data === "object" && data.task) {
      hear(arrived, data.task);
    } else if (data && typeof data === "object" && data.statusUpdate) {
      hear(updated, data.statusUpdate);
    }
  });
  events.addEventListener("error", () => {
    if (events.readyState === EventSource.CLOSED) {
      liveState("ended");
      banner(ENDED_TEXT);
    } else {
      liveState("connecting");
      view.beaconDown = true;
      banner(CONSOLE_DOWN_TEXT);
    }
  });
}

// The keys.

function isTyping(target) {
  if (target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) {
    return true;
  }
  return target instanceof HTMLInputElement
    && !["checkbox", "radio", "button", "submit", "reset"].includes(target.type);
}

function isControl(target) {
  return target instanceof HTMLButtonElement || target instanceof HTMLInputElement
    || target instanceof HTMLAnchorElement || target instanceof HTMLSelectElement
    || target instanceof HTMLTextAreaElement;
}

function onKey(event) {
  if (event.defaultPrevented || event.isComposing) {
    return;
  }
  if ($("confirm").open || $("keys").open) {
    return; // the dialog's own keys (Escape closes it)
  }
  const target = event.target;
  if (target === $("note")) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      if (view.pending) {
        decide(view.pending);
      } else {
        $("pending").textContent = "Press a (accept) or r (reject) first, or use the buttons.";
      }
    } else if (event.key === "Escape") {
      event.preventDefault();
      cancelPending();
      $("detail-subject").focus();
    }
    return;
  }
  if (isTyping(target)) {
    if (event.key === "Escape") {
      event.preventDefault();
      target.blur();
    }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey) {
    return;
  }
  const detail = view.openId !== null;
  switch (event.key) {
    case "j":
      event.preventDefault();
      detail ? step(1) : move(1);
      break;
    case "k":
      event.preventDefault();
      detail ? step(-1) : move(-1);
      break;
    case "o":
    case "Enter":
      if (event.key === "Enter" && isControl(target)) {
        return; // the focused control's own Enter
      }
      if (!detail && view.tasks[view.current]) {
        event.preventDefault();
        go(view.tasks[view.current].id);
      }
      break;
    case "a":
    case "r": {
      event.preventDefault();
      const decision = event.key === "a" ? "accept" : "reject";
      if (detail) {
        beginPending(decision);
      } else if (view.tasks[view.current]) {
        Promise.resolve(go(view.tasks[view.current].id)).then(() => beginPending(decision));
      }
      break;
    }
    case "n":
      if (detail && !$("decide-form").hidden) {
        event.preventDefault();
        $("note").focus();
      }
      break;
    case "x": {
      event.preventDefault();
      const id = detail ? view.openId : view.tasks[view.current]?.id;
      if (id) {
        toggle(id);
      }
      break;
    }
    case "/":
      event.preventDefault();
      if (detail) {
        go(null);
      }
      $("search").focus();
      $("search").select();
      break;
    case "Escape":
    case "u":
      if (detail) {
        event.preventDefault();
        go(null);
      } else if (event.key === "Escape") {
        say("");
      }
      break;
    case "?":
      event.preventDefault();
      $("keys").showModal();
      $("keys-close").focus();
      break;
    default:
      break;
  }
}

// Wiring.

// Whatever the Content-Security-Policy blocked (nothing, unless something
// is wrong): said on the page, and counted on <html data-csp-violations>.
function watchPolicy() {
  let count = 0;
  document.documentElement.dataset.cspViolations = "0";
  document.addEventListener("securitypolicyviolation", (event) => {
    count += 1;
    document.documentElement.dataset.cspViolations = String(count);
    say(`The browser blocked ${event.effectiveDirective || "something"} on this page`
      + " (Content-Security-Policy); it is reported to the console.", "error");
  });
}

function start() {
  watchPolicy();
  startTriage(() => layout(view.openId !== null));
  setTitle();
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    view.selected.clear();
    view.matching = false;
    load(true);
  });
  $("filters").addEventListener("reset", () => {
    // after the form has reset its fields
    setTimeout(() => $("filters").requestSubmit(), 0);
  });
  for (const id of ["state", "door", "since", "until", "sort"]) {
    $(id).addEventListener("change", () => $("filters").requestSubmit());
  }
  $("more").addEventListener("click", () => load(false));
  $("arrivals-show").addEventListener("click", () => load(true));

  $("inbox").addEventListener("click", (event) => {
    const row = event.target.closest(".row");
    if (!row) {
      return;
    }
    view.current = [...rows()].indexOf(row);
    if (event.target.classList.contains("pick")) {
      return;
    }
    markCurrent(false);
    go(row.dataset.id);
  });
  $("inbox").addEventListener("change", (event) => {
    if (event.target.classList.contains("pick")) {
      toggle(event.target.closest(".row").dataset.id, event.target.checked);
    }
  });
  $("inbox").addEventListener("focusin", (event) => {
    const row = event.target.closest(".row");
    if (row) {
      view.current = [...rows()].indexOf(row);
      markCurrent(false);
    }
  });
  $("select-page").addEventListener("change", (event) => {
    for (const task of view.tasks) {
      if (event.target.checked) {
        view.selected.add(task.id);
      } else {
        view.selected.delete(task.id);
      }
    }
    view.matching = false;
    renderSelection();
  });
  $("select-matching").addEventListener("click", selectMatching);
  $("select-none").addEventListener("click", () => {
    view.selected.clear();
    view.matching = false;
    renderSelection();
  });
  $("bulk-accept").addEventListener("click", () => confirmBulk("accept"));
  $("bulk-reject").addEventListener("click", () => confirmBulk("reject"));
  $("confirm").addEventListener("close", () => {
    const dialog = $("confirm");
    if (dialog.returnValue === "ok") {
      decideMany(dialog.dataset.decision, $("confirm-note").value, view.confirming);
    }
  });

  $("back").addEventListener("click", () => go(null));
  $("previous").addEventListener("click", () => step(-1));
  $("next").addEventListener("click", () => step(1));
  $("accept").addEventListener("click", () => decide("accept"));
  $("reject").addEventListener("click", () => decide("reject"));
  $("decide-form").addEventListener("submit", (event) => event.preventDefault());
  $("keys-button").addEventListener("click", () => {
    $("keys").showModal();
    $("keys-close").focus();
  });

  document.addEventListener("keydown", onKey);
  window.addEventListener("popstate", route);
  window.addEventListener("focus", () => {
    view.newCount = 0;
    setTitle();
  });

  listen();
  loadChoices().catch(failed);
  load(true).then(route);
}

start();
