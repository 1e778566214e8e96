// A run's page: everything follows the run's SSE stream. Updates are queued and applied
// at most once per animation frame; a row's cells are touched only when its data changed.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const S = window.SIMPLE;
  const root = document.getElementById("run");
  const runId = root.dataset.run;
  const created = Date.parse(root.dataset.created);
  const EVENTS_KEPT = 200;
  const FINAL = ["succeeded", "failed", "cancelled", "budget_exceeded"];
  const rows = new Map();
  document.querySelectorAll('#sandboxes tbody tr[id^="sb-"]').forEach(function (tr, index) {
    rows.set(tr.id.slice(3), {tr: tr, cells: tr.cells, key: null, index: index});
  });
  const svg = document.getElementById("timeline");
  const eventsList = document.getElementById("events");
  let pendingRun = null, pendingEvents = [], scheduled = false, ended = FINAL.includes(root.dataset.status);
  let spanS = parseFloat(svg.dataset.span) || 1;

  function schedule() {
    if (scheduled) return;
    scheduled = true;
    // requestAnimationFrame does not fire in a hidden tab; the timeout keeps state moving.
    const flushOnce = function () { if (scheduled) { scheduled = false; flush(); } };
    requestAnimationFrame(flushOnce);
    setTimeout(flushOnce, 250);
  }

  function flush() {
    if (pendingEvents.length) { applyEvents(pendingEvents); pendingEvents = []; }
    if (pendingRun) { applyRun(pendingRun); pendingRun = null; }
  }

  function applyRun(run) {
    S.setBadge(document.getElementById("run-status"), run.status);
    root.dataset.status = run.status;
    const totals = {total: 0, done: 0, running: 0, pending: 0, succeeded: 0, failed: 0,
      cancelled: 0, skipped: 0, cost: 0};
    run.sandboxes.forEach(function (s) {
      totals.total += 1; totals.cost += s.cost_usd;
      if (s.status === "running" || s.status === "pending") totals[s.status] += 1;
      else totals.done += 1;
      if (s.status === "succeeded" || s.status === "cancelled" || s.status === "skipped") totals[s.status] += 1;
      else if (["failed", "timeout", "oom", "lost"].includes(s.status)) totals.failed += 1;
      updateRow(s);
    });
    ["done", "total", "running", "pending", "succeeded", "failed", "cancelled", "skipped"].forEach(function (k) {
      document.getElementById("t-" + k).textContent = S.number(totals[k]);
    });
    document.getElementById("t-cost").textContent = S.money(totals.cost);
    const progress = document.getElementById("progress");
    progress.max = totals.total || 1; progress.value = totals.done;
    document.getElementById("cost-meter").value = totals.cost;
    if (run.cancel_requested || FINAL.includes(run.status)) document.getElementById("cancel").hidden = true;
    const stage = document.getElementById("run-stage");
    if (stage && typeof run.stage === "number") stage.textContent = String(run.stage + 1);
    const duration = document.getElementById("run-duration");
    duration.dataset.since = run.started_at || run.created_at;
    duration.dataset.until = run.finished_at || "";
  }

  function updateRow(s) {
    const row = rows.get(s.sandbox_id);
    if (!row) return;
    const key = [s.status, s.step, s.steps_total, s.cost_usd, s.attempts, s.launched_at,
      s.finished_at, s.error].join("|");
    if (key === row.key) return;
    row.key = key;
    const c = row.cells;
    row.tr.dataset.status = s.status;
    S.setBadge(c[1].firstElementChild, s.status);
    c[2].textContent = (s.step === null ? "–" : s.step) + "/" + (s.steps_total === null ? "–" : s.steps_total);
    c[3].textContent = S.money(s.cost_usd);
    c[4].textContent = String(s.attempts);
    c[5].dataset.since = s.launched_at || "";
    c[5].dataset.until = s.finished_at || "";
    if (s.error) c[6].textContent = s.error;
    updateBar(s, row.index);
  }

  function updateBar(s, index) {
    if (!s.launched_at || !s.attempts) return;
    const id = "tl-" + s.sandbox_id + "-" + s.attempts;
    let bar = document.getElementById(id);
    if (!bar) {
      svg.querySelectorAll('rect[data-sandbox="' + s.sandbox_id + '"]').forEach(function (old) {
        old.setAttribute("class", "bar b-retried");
      });
      bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
      bar.id = id;
      bar.dataset.sandbox = s.sandbox_id;
      bar.setAttribute("x", String((Date.parse(s.launched_at) - created) / 1000));
      bar.setAttribute("y", String(index + 0.15));
      bar.setAttribute("height", "0.7");
      bar.setAttribute("width", "0");
      const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
      title.textContent = s.template_id + " · attempt " + s.attempts;
      bar.appendChild(title);
      svg.appendChild(bar);
    }
    const live = s.status === "running" || s.status === "pending";
    bar.setAttribute("class", "bar b-" + s.status + (live ? " live" : ""));
    if (!live && s.finished_at) {
      const x = parseFloat(bar.getAttribute("x"));
      bar.setAttribute("width", String(Math.max(0, (Date.parse(s.finished_at) - created) / 1000 - x)));
    }
  }

  function tickTimeline() {
    if (ended) return;
    const now = (Date.now() - created) / 1000;
    spanS = Math.max(spanS, now);
    svg.setAttribute("viewBox", "0 0 " + spanS + " " + Math.max(1, rows.size));
    svg.querySelectorAll("rect.live").forEach(function (bar) {
      bar.setAttribute("width", String(Math.max(0, now - parseFloat(bar.getAttribute("x")))));
    });
    document.getElementById("timeline-span").textContent = S.duration(spanS);
  }

  function applyEvents(list) {
    const fragment = document.createDocumentFragment();
    for (let i = list.length - 1; i >= 0; i--) {
      const e = list[i];
      const li = S.el("li", "ev-" + e.type);
      const time = S.el("time", null, S.localTime(e.time));
      time.setAttribute("datetime", e.time);
      const link = S.el("a", null, e.sandbox_id);
      link.href = "/sandboxes/" + encodeURIComponent(e.sandbox_id);
      li.append(time, " ", link, " ", S.el("span", "ev-type", e.type), " ",
        S.el("span", "ev-msg", S.message(e.type, e.data)));
      fragment.appendChild(li);
    }
    const latest = new Map();
    list.forEach(function (e) { latest.set(e.sandbox_id, e); });
    latest.forEach(function (e, id) {
      const row = rows.get(id);
      if (row) row.cells[6].textContent = S.message(e.type, e.data);
    });
    const empty = eventsList.querySelector("li.empty");
    if (empty) empty.remove();
    eventsList.insertBefore(fragment, eventsList.firstChild);
    while (eventsList.children.length > EVENTS_KEPT) eventsList.lastElementChild.remove();
  }

  function showReport() {
    document.getElementById("downloads").hidden = false;
    document.getElementById("cancel").hidden = true;
    fetch("/runs/" + encodeURIComponent(runId) + "/report-fragment", {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (html) {
        // Server-rendered and escaped; the CSP keeps any script inert regardless.
        const report = document.getElementById("report");
        report.innerHTML = html;
        S.localizeTimes(report);
      })
      .catch(function () { /* the downloads still work */ });
  }

  window.SIMPLE.runPage = {applyRun: applyRun};  // for bench/dashboard_bench.py's browser part

  if (!ended) {
    const source = new EventSource("/v1/runs/" + encodeURIComponent(runId) + "/stream?after=" + root.dataset.after);
    source.addEventListener("run", function (ev) { pendingRun = JSON.parse(ev.data); schedule(); });
    source.addEventListener("sandbox-event", function (ev) { pendingEvents.push(JSON.parse(ev.data)); schedule(); });
    source.addEventListener("end", function () {
      source.close();
      ended = true;
      flush();
      root.dataset.ended = "true";
      showReport();
    });
    setInterval(tickTimeline, 1000);
  }

  const dialog = document.getElementById("cancel-dialog");
  document.getElementById("cancel").addEventListener("click", function () { dialog.showModal(); });
  dialog.addEventListener("close", function () {
    if (dialog.returnValue !== "cancel") return;
    const button = document.getElementById("cancel");
    button.disabled = true;
    button.textContent = "Cancelling…";
    S.api("POST", "/v1/runs/" + encodeURIComponent(runId) + "/cancel").then(function () {
      button.hidden = true;
    }).catch(function (err) {
      button.disabled = false;
      button.textContent = "Cancel run…";
      window.alert("Could not cancel: " + err.message);
    });
  });
});
