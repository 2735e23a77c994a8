// Triage: the reading pane beside the list on a wide screen, the next
// undecided submission after a decision, and the filters folded behind
// one control on a phone. No submitted text passes through here.

// At least this wide, an opened submission shows beside the list;
// narrower, it takes the whole screen (with its "← Inbox" control).
export const PANE = window.matchMedia("(min-width: 1024px)");
// At most this wide (a phone), the filters fold behind "Filters".
const PHONE = window.matchMedia("(max-width: 760px)");

const $ = (id) => document.getElementById(id);

// Show the list, the opened submission, or both side by side.
export function layout(open) {
  const split = open && PANE.matches;
  $("panes").classList.toggle("split", split);
  $("list-view").hidden = open && !split;
  $("detail-view").hidden = !open;
}

// The index of the first undecided submission after `index` in the list's
// order, or -1.
export function nextUndecided(tasks, index) {
  for (let i = index + 1; i < tasks.length; i++) {
    if (tasks[i]?.status?.state === "TASK_STATE_SUBMITTED") {
      return i;
    }
  }
  return -1;
}

function folded(open) {
  $("filters").classList.toggle("open", open);
  $("filters-toggle").setAttribute("aria-expanded", String(open));
}

// Unfold the filters (a phone's "Filters"); the search box always shows.
export function unfoldFilters() {
  folded(true);
}

// `relayout` is called when the screen crosses the pane's width.
export function startTriage(relayout) {
  folded(false);
  $("filters-toggle").addEventListener("click", () => {
    folded(!$("filters").classList.contains("open"));
  });
  PANE.addEventListener("change", relayout);
  PHONE.addEventListener("change", () => folded($("filters").classList.contains("open")));
}
