// SIMPLE dashboard: shared helpers. Untrusted text only ever goes through textContent.
"use strict";
(function () {
  const moneyFmt = new Intl.NumberFormat(undefined, {style: "currency", currency: "USD",
    minimumFractionDigits: 2, maximumFractionDigits: 2});
  const smallMoneyFmt = new Intl.NumberFormat(undefined, {style: "currency", currency: "USD",
    minimumFractionDigits: 4, maximumFractionDigits: 4});
  const numberFmt = new Intl.NumberFormat(undefined, {maximumFractionDigits: 2});
  const timeFmt = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "medium"});

  function money(v) {
    if (v === null || v === undefined) return "–";
    return (Math.abs(v) >= 0.01 || v === 0 ? moneyFmt : smallMoneyFmt).format(v);
  }
  function number(v) { return v === null || v === undefined ? "–" : numberFmt.format(v); }
  function duration(seconds) {
    if (seconds === null || seconds === undefined || isNaN(seconds)) return "–";
    const s = Math.max(0, Math.round(seconds));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    if (m) return m + "m " + String(r).padStart(2, "0") + "s";
    return r + "s";
  }
  function localTime(iso) { return iso ? timeFmt.format(new Date(iso)) : "–"; }

  function message(type, data) {
    data = data || {};
    if (type === "progress") {
      let text = data.steps_total ? "step " + data.step + "/" + data.steps_total : "step " + data.step;
      if (typeof data.item_id === "string") text += " · item " + data.item_id;
      return text;
    }
    if (type === "error" || type === "failed") {
      const e = (data.error && typeof data.error === "object") ? data.error : data;
      const text = type + ": " + (e.type || "error") + ": " + (e.message || "");
      return text.length > 300 ? text.slice(0, 299) + "…" : text;
    }
    if (type === "started" && data.resumed_from_step) {
      return "started (resumed from step " + data.resumed_from_step + ")";
    }
    return type;
  }

  function csrf() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  async function api(method, url, body, extraHeaders) {
    const headers = Object.assign({"X-CSRF-Token": csrf(), "Accept": "application/json"},
      extraHeaders || {});
    const init = {method: method, headers: headers, credentials: "same-origin"};
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const err = data && data.error ? data.error : {message: "HTTP " + response.status};
      const error = new Error(err.message + (err.hint ? " — " + err.hint : ""));
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setBadge(node, status) {
    node.className = "badge s-" + status;
    node.textContent = status;
  }

  function localizeTimes(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (t) {
      const iso = t.getAttribute("datetime");
      if (iso && iso !== "None") { t.textContent = localTime(iso); t.title = iso; }
    });
  }

  function tickDurations() {
    const now = Date.now();
    document.querySelectorAll("[data-since]").forEach(function (node) {
      const since = node.dataset.since;
      if (!since) return;
      const until = node.dataset.until;
      const end = until ? Date.parse(until) : now;
      node.textContent = duration((end - Date.parse(since)) / 1000);
    });
  }

  function wireForms() {
    document.querySelectorAll("form[data-csrf-form]").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        fetch(form.action, {method: "POST", credentials: "same-origin",
          headers: {"X-CSRF-Token": csrf()}}).then(function (r) {
          window.location.assign(r.redirected ? r.url : "/login");
        });
      });
    });
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
  }

  window.SIMPLE = {money, number, duration, localTime, message, api, el, setBadge,
    localizeTimes, tickDurations, csrf};
  document.addEventListener("DOMContentLoaded", function () {
    localizeTimes(document);
    tickDurations();
    setInterval(tickDurations, 1000);
    wireForms();
  });
})();
