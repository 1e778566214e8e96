// A sandbox's page: its state and events from the run's stream; its logs followed live
// while it runs (fetch + stream reader), read from the archive once it has ended.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const S = window.SIMPLE;
  const root = document.getElementById("sandbox");
  const id = root.dataset.sandbox, runId = root.dataset.run;
  const log = document.getElementById("log"), logState = document.getElementById("logs-state");
  const eventsList = document.getElementById("events");
  const LOG_KEPT = 2000000;
  let following = false, archived = false, status = root.dataset.status;

  function setLog(text) {
    log.textContent = text.length > LOG_KEPT ? "…" + text.slice(-LOG_KEPT) : text;
  }

  async function follow() {
    following = true;
    logState.textContent = "following";
    let text = "";
    try {
      const response = await fetch("/v1/sandboxes/" + encodeURIComponent(id) + "/logs?follow=true",
        {credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        text += decoder.decode(chunk.value, {stream: true});
        setLog(text);
        if (atBottom) log.scrollTop = log.scrollHeight;
      }
    } catch (err) {
      logState.textContent = "";
    }
    following = false;
    logState.textContent = "";
    setTimeout(archive, 500);
  }

  async function archive() {
    if (following || archived || status === "running") return;
    archived = true;
    const response = await fetch("/v1/sandboxes/" + encodeURIComponent(id) + "/logs",
      {credentials: "same-origin"});
    if (response.ok) {
      setLog(await response.text());
      logState.textContent = "archived";
    } else {
      let message = "No logs.";
      try { message = (await response.json()).error.message; } catch (e) { /* keep default */ }
      setLog(message);
      archived = status !== "pending";
    }
  }

  function applySandbox(s) {
    status = s.status;
    root.dataset.status = s.status;
    S.setBadge(document.getElementById("sb-status"), s.status);
    document.getElementById("sb-step").textContent =
      (s.step === null ? "–" : s.step) + "/" + (s.steps_total === null ? "–" : s.steps_total);
    document.getElementById("sb-cost").textContent = S.money(s.cost_usd);
    document.getElementById("sb-tokens").textContent = S.number(s.tokens);
    document.getElementById("sb-attempts").textContent = String(s.attempts);
    document.getElementById("sb-exit").textContent = s.exit_code === null ? "–" : String(s.exit_code);
    const duration = document.getElementById("sb-duration");
    duration.dataset.since = s.launched_at || "";
    duration.dataset.until = s.finished_at || "";
    if (s.status === "running" && !following) follow();
    else if (s.status !== "running" && s.status !== "pending" && !following) archive();
  }

  function addEvent(e) {
    const li = S.el("li", "ev-" + e.type);
    const time = S.el("time", null, S.localTime(e.time));
    time.setAttribute("datetime", e.time);
    li.append(time, " ", S.el("span", "ev-type", e.type), " ",
      S.el("span", "ev-attempt", "attempt " + e.attempt), " ",
      S.el("span", "ev-msg", S.message(e.type, e.data)));
    const empty = eventsList.querySelector("li.empty");
    if (empty) empty.remove();
    eventsList.insertBefore(li, eventsList.firstChild);
    while (eventsList.children.length > 200) eventsList.lastElementChild.remove();
  }

  if (status === "running") follow(); else archive();
  const source = new EventSource("/v1/runs/" + encodeURIComponent(runId) + "/stream?after=" + root.dataset.after);
  source.addEventListener("run", function (ev) {
    const run = JSON.parse(ev.data);
    const s = run.sandboxes.find(function (x) { return x.sandbox_id === id; });
    if (s) applySandbox(s);
  });
  source.addEventListener("sandbox-event", function (ev) {
    const e = JSON.parse(ev.data);
    if (e.sandbox_id === id) addEvent(e);
  });
  source.addEventListener("end", function () { source.close(); });
});
