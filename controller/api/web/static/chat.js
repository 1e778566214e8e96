// The chat panel: each turn is POST /v1/chat; choices and yes/no are buttons.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const S = window.SIMPLE;
  const log = document.getElementById("chat-log");
  const form = document.getElementById("chat-form");
  const input = document.getElementById("chat-message");
  const actions = document.getElementById("chat-actions");
  const errorBox = document.getElementById("chat-error");
  let conversation = null;

  function add(who, text, reply) {
    const li = S.el("li", "chat-" + who);
    li.appendChild(S.el("strong", null, who === "you" ? "You" : "Principal"));
    li.appendChild(S.el("pre", "chat-text", text));
    if (reply && reply.run && reply.run.run_id) {
      const link = S.el("a", null, "Open " + reply.run.run_id);
      link.href = "/runs/" + encodeURIComponent(reply.run.run_id);
      li.appendChild(link);
    }
    log.appendChild(li);
    li.scrollIntoView({block: "nearest"});
  }

  function button(label, message, confirm) {
    const b = S.el("button", "button", label);
    b.type = "button";
    b.addEventListener("click", function () { send(message, confirm); });
    return b;
  }

  function offer(reply) {
    actions.replaceChildren();
    (reply.choices || []).forEach(function (c) {
      actions.appendChild(button(c.key + ") " + c.label, c.key, false));
    });
    if (reply.needs_confirmation) {
      actions.appendChild(button("Yes", "yes", false));
      actions.appendChild(button("No", "no", false));
    }
    actions.hidden = actions.childElementCount === 0;
  }

  function send(message, confirm) {
    errorBox.hidden = true;
    add("you", message);
    const body = {message: message, confirm: !!confirm};
    if (conversation) body.conversation_id = conversation;
    S.api("POST", "/v1/chat", body).then(function (reply) {
      conversation = reply.conversation_id;
      add("principal", reply.text, reply);
      offer(reply);
    }).catch(function (err) {
      if (err.status === 404) conversation = null;  // the conversation ended: start anew
      errorBox.textContent = err.message;
      errorBox.hidden = false;
    });
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    const message = input.value.trim();
    if (!message) return;
    input.value = "";
    send(message, false);
  });
});
