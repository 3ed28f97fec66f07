// runfold view: a little plain JavaScript, no build step. Local times, the run-compare picker,
// auto-submitting selects, and the live tail (Server-Sent Events) of a run's last page.
"use strict";

function localTimes() {
  for (const el of document.querySelectorAll("[data-ms]")) {
    const ms = Number(el.dataset.ms);
    if (ms > 0) {
      el.textContent = new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
    }
  }
}

function comparePicker() {
  const link = document.querySelector("[data-compare]");
  if (!link) return;
  link.addEventListener("click", (ev) => {
    const picked = [...document.querySelectorAll("input.pick:checked")].map((b) => b.value);
    if (picked.length !== 2) {
      ev.preventDefault();
      alert("tick exactly two runs to compare");
      return;
    }
    link.href = document.body.dataset.base + "/diff?a=" + encodeURIComponent(picked[0]) + "&b=" + encodeURIComponent(picked[1]);
  });
}

function autoSubmit() {
  for (const sel of document.querySelectorAll("select[data-autosubmit]")) {
    sel.addEventListener("change", () => sel.form.submit());
  }
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text; // text only: a line's words never become markup
  tr.appendChild(td);
  return td;
}

function liveTail() {
  const table = document.getElementById("timeline");
  if (!table || table.dataset.live !== "yes" || !window.EventSource) return;
  const base = document.body.dataset.base;
  const run = table.dataset.run;
  let last = Number(table.dataset.last);
  const body = table.querySelector("tbody");
  const src = new EventSource(base + "/runs/" + encodeURIComponent(run) + "/tail?since=" + (last + 1));
  src.addEventListener("line", (ev) => {
    const row = JSON.parse(ev.data);
    if (row.seq <= last) return; // shown already: never twice, never out of order
    last = row.seq;
    const empty = body.querySelector("td.note");
    if (empty) empty.parentElement.remove();
    const tr = document.createElement("tr");
    tr.dataset.seq = String(row.seq);
    tr.className = "k-" + row.kind + " fresh";
    const first = cell(tr, "", "n");
    const a = document.createElement("a");
    a.href = base + "/runs/" + run + "/lines/" + row.seq;
    a.textContent = String(row.seq);
    a.className = "seq-link";
    first.appendChild(a);
    cell(tr, row.t, "t");
    cell(tr, row.kind);
    cell(tr, row.who);
    cell(tr, row.summary, "sum");
    const links = cell(tr, "", "links");
    if (row.kind === "model_called") {
      const r = document.createElement("a");
      r.href = base + "/runs/" + run + "/request?at=" + row.seq;
      r.textContent = "request ";
      r.className = "request-at";
      links.appendChild(r);
    }
    const w = document.createElement("a");
    w.href = base + "/runs/" + run + "/window?at=" + row.seq;
    w.textContent = "window";
    links.appendChild(w);
    body.appendChild(tr);
    table.dataset.last = String(last);
    const waiting = document.getElementById("waiting-note");
    if (waiting && row.kind === "approval_requested") waiting.hidden = false;
  });
  src.addEventListener("failed", (ev) => {
    src.close();
    const note = document.getElementById("live-note");
    if (note) note.textContent = "the live tail stopped: " + JSON.parse(ev.data);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes();
  comparePicker();
  autoSubmit();
  liveTail();
});
