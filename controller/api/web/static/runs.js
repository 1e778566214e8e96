// Runs list: rows follow /live/runs (server-sent events), no reload.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const S = window.SIMPLE;
  const table = document.getElementById("runs");
  const live = document.getElementById("live");
  const params = new URLSearchParams({page: table.dataset.page});
  if (table.dataset.status) params.set("status", table.dataset.status);
  const source = new EventSource("/live/runs?" + params.toString());
  source.addEventListener("open", function () { live.textContent = "live"; live.classList.remove("off"); });
  source.addEventListener("error", function () { live.textContent = "reconnecting…"; live.classList.add("off"); });
  source.addEventListener("runs", function (ev) {
    const data = JSON.parse(ev.data);
    const body = document.createElement("tbody");
    data.runs.forEach(function (r) { body.appendChild(row(r)); });
    if (!data.runs.length) {
      const tr = S.el("tr", "empty"), td = S.el("td", null, "No runs yet.");
      td.colSpan = 8; tr.appendChild(td); body.appendChild(tr);
    }
    table.replaceChild(body, table.tBodies[0]);
    S.tickDurations();
  });

  function row(r) {
    const tr = S.el("tr");
    tr.dataset.run = r.run_id;
    const link = S.el("a", null, r.run_id);
    link.href = "/runs/" + encodeURIComponent(r.run_id);
    cell(tr, null, link);
    cell(tr, null, S.el("span", "badge s-" + r.status, r.status));
    const progress = document.createElement("progress");
    progress.max = r.total || 1; progress.value = r.done;
    progress.setAttribute("aria-label", "sandboxes done");
    const td = cell(tr, "progress-cell", progress);
    td.appendChild(document.createTextNode(" "));
    td.appendChild(S.el("span", "count", S.number(r.done) + "/" + S.number(r.total)));
    cell(tr, "num", S.money(r.cost_usd));
    const est = r.plan.estimated_cost_usd || [0, 0];
    cell(tr, "num hide-narrow", S.money(est[0]) + "–" + S.money(est[1]));
    cell(tr, "num hide-narrow", S.money(r.budget_usd));
    const time = S.el("time", null, S.localTime(r.started_at || r.created_at));
    time.setAttribute("datetime", r.started_at || r.created_at);
    cell(tr, null, time);
    const dur = cell(tr, "num", "…");
    dur.dataset.since = r.started_at || r.created_at;
    dur.dataset.until = r.finished_at || "";
    return tr;
  }

  function cell(tr, className, content) {
    const td = S.el("td", className);
    if (typeof content === "string") td.textContent = content; else td.appendChild(content);
    tr.appendChild(td);
    return td;
  }
});
