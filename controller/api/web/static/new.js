// Plan and start: POST /v1/plans shows what would run; POST /v1/runs starts exactly that.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const S = window.SIMPLE;
  const form = document.getElementById("plan-form");
  const startButton = document.getElementById("start-button");
  const errorBox = document.getElementById("form-error");
  const planBox = document.getElementById("plan");
  let planned = null;

  function body() {
    const data = new FormData(form);
    const request = {suites: data.getAll("suites"), templates: data.getAll("templates")};
    // "" = as the words say (a query's "the cheapest way"), else balanced
    if (data.get("priority")) request.priority = data.get("priority");
    const query = (data.get("query") || "").trim();
    if (query) request.query = query;
    const budget = parseFloat(data.get("budget_usd"));
    if (!isNaN(budget)) request.budget_usd = budget;
    const parallel = parseInt(data.get("max_parallel"), 10);
    if (!isNaN(parallel)) request.max_parallel = parallel;
    return request;
  }

  function randomKey() {  // crypto.randomUUID needs a secure context; this does not
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), function (b) {
      return b.toString(16).padStart(2, "0");
    }).join("");
  }

  function showError(err) {
    errorBox.textContent = err.message;
    errorBox.hidden = false;
  }

  function list(node, items) {
    node.replaceChildren();
    items.forEach(function (item) { node.appendChild(item); });
  }

  function renderPlan(plan) {
    const cost = plan.estimated_cost_usd, time = plan.estimated_runtime_s;
    document.getElementById("plan-selected-count").textContent = S.number(plan.selected.length);
    document.getElementById("plan-excluded-count").textContent = S.number(plan.excluded.length);
    document.getElementById("plan-cost").textContent = S.money(cost[0]) + "–" + S.money(cost[1]);
    document.getElementById("plan-time").textContent = S.duration(time[0]) + "–" + S.duration(time[1]);
    document.getElementById("plan-parallel").textContent = S.number(plan.max_parallel);
    document.getElementById("plan-budget").textContent = plan.budget_usd ? S.money(plan.budget_usd) : "none";
    list(document.getElementById("plan-selected"), plan.selected.map(function (id) {
      return S.el("li", null, id);
    }));
    list(document.getElementById("plan-excluded"), plan.excluded.length ? plan.excluded.map(function (e) {
      const li = S.el("li");
      li.append(S.el("code", null, e.template_id), " — ", S.el("span", null, e.reason));
      return li;
    }) : [S.el("li", "muted", "nothing")]);
    planBox.hidden = false;
    planBox.focus();
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    errorBox.hidden = true;
    const request = body();
    S.api("POST", "/v1/plans", request).then(function (plan) {
      planned = {request: request, key: "dashboard-" + randomKey()};
      renderPlan(plan);
      startButton.disabled = plan.selected.length === 0;
    }).catch(function (err) { planned = null; startButton.disabled = true; showError(err); });
  });

  form.addEventListener("input", function (ev) {
    if (ev.target.id === "template-filter") return;
    planned = null;  // what was planned is no longer what the form says
    startButton.disabled = true;
  });

  startButton.addEventListener("click", function () {
    if (!planned) return;
    startButton.disabled = true;
    S.api("POST", "/v1/runs", planned.request, {"Idempotency-Key": planned.key}).then(function (run) {
      window.location.assign("/runs/" + encodeURIComponent(run.run_id));
    }).catch(function (err) { startButton.disabled = false; showError(err); });
  });

  const filter = document.getElementById("template-filter");
  filter.addEventListener("input", function () {
    const needle = filter.value.trim().toLowerCase();
    document.querySelectorAll(".template-list tbody tr").forEach(function (tr) {
      tr.hidden = needle !== "" && !tr.dataset.search.includes(needle);
    });
  });
});
