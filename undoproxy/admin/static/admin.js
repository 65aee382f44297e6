// undoproxy's admin page: live refresh over /api/events, decisions, batch actions, rollback,
// the kill switch (a session's, and every session's in the header) and resolving steps.
// No framework, no build step. HTML inserted here always comes from the server (escaped
// there); anything this script builds itself is set with textContent.
"use strict";

(() => {
  const view = document.body.dataset.view;
  const title = document.title;
  // The page key lives in this tab's sessionStorage (scoped to scheme + host + port) and goes
  // out only in the Authorization header of our own calls: never in a cookie, which the
  // browser would also send to every other port of this host.
  const STORE = "undoproxy.page";
  let signedIn = null; // {key, name}
  try {
    signedIn = JSON.parse(sessionStorage.getItem(STORE) || "null");
  } catch (_) {
    signedIn = null;
  }

  // --- talking to undoproxy ------------------------------------------------------------

  function auth() {
    return signedIn ? { Authorization: `Bearer ${signedIn.key}` } : {};
  }

  class SignedOut extends Error {}

  async function api(method, path, body) {
    const response = await fetch(path, {
      method,
      credentials: "omit",
      headers: { "Content-Type": "application/json", ...auth() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (response.status === 401) {
      signOut("Signed out: sign in again.");
      throw new SignedOut("signed out");
    }
    if (!response.ok) throw new Error((data && data.message) || `HTTP ${response.status}`);
    return data;
  }

  async function partial() {
    // The page of a long list (its pager's ?cursor=) comes along.
    const query = new URLSearchParams(location.search);
    query.set("partial", "1");
    const response = await fetch(`${location.pathname}?${query}`, { credentials: "omit", headers: auth() });
    if (response.status === 401) {
      signOut("Signed out: sign in again.");
      return null;
    }
    if (!response.ok) return null;
    const template = document.createElement("template");
    template.innerHTML = await response.text();
    return template.content;
  }

  // --- signing in and out ----------------------------------------------------------------

  let stream = null; // the AbortController of the event stream

  function showSignin(message) {
    document.getElementById("nav").hidden = true;
    document.getElementById("who").hidden = true;
    document.getElementById("kill").hidden = true;
    const form = document.getElementById("signin-template").content.cloneNode(true);
    const main = document.getElementById("main");
    main.replaceChildren(form);
    delete main.dataset.loaded;
    document.title = "Sign in · undoproxy";
    showError(document.getElementById("signin-error"), message || "");
    document.getElementById("signin").addEventListener("submit", signIn);
    document.querySelector("#signin input[name=token]").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const form = event.target;
    const error = document.getElementById("signin-error");
    const token = form.elements.token.value.trim();
    const name = form.elements.name.value.trim();
    let response;
    try {
      response = await fetch("/api/signin", {
        method: "POST",
        credentials: "omit",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify({ name }),
      });
    } catch (e) {
      return showError(error, `undoproxy did not answer: ${e.message}`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (response.status === 401) return showError(error, "That is not the admin token.");
    if (!response.ok) return showError(error, (data && data.message) || `HTTP ${response.status}`);
    signedIn = { key: data.key, name: data.name };
    sessionStorage.setItem(STORE, JSON.stringify(signedIn));
    start();
  }

  function signOut(message) {
    if (stream) stream.abort();
    stream = null;
    signedIn = null;
    sessionStorage.removeItem(STORE);
    showSignin(message);
  }

  async function signOutClicked() {
    // Forget the key server-side first (the page shows signed out only once it is gone);
    // if undoproxy does not answer, the key still leaves this tab.
    try {
      await fetch("/api/signout", { method: "POST", credentials: "omit", headers: auth() });
    } catch (_) {
      // nothing more to do: the key is dropped below, and the server's copy idles out
    }
    signOut("");
  }

  function showError(node, message) {
    if (!node) return;
    node.textContent = message || "";
    node.hidden = !message;
  }

  // --- times ---------------------------------------------------------------------------

  function localize(root) {
    for (const t of root.querySelectorAll("time[data-ts]")) {
      t.title = t.textContent;
      const moment = new Date(parseFloat(t.dataset.ts) * 1000);
      t.textContent = t.classList.contains("short") ? moment.toLocaleTimeString() : moment.toLocaleString();
      delete t.dataset.ts;
    }
  }

  function tick() {
    const now = Date.now() / 1000;
    for (const t of document.querySelectorAll("time.countdown[data-expires]")) {
      const left = Math.max(0, Math.round(parseFloat(t.dataset.expires) - now));
      const minutes = Math.floor(left / 60);
      const seconds = String(left % 60).padStart(2, "0");
      t.textContent = left >= 60 ? `in ${minutes}m ${seconds}s` : `in ${left}s`;
      t.classList.toggle("soon", left < 30);
    }
  }

  // --- live updates ----------------------------------------------------------------------

  let pendingRefresh = null;
  function schedule() {
    clearTimeout(pendingRefresh);
    pendingRefresh = setTimeout(refresh, 150);
  }

  function concerns(kind, event) {
    if (view !== "timeline") return true;
    const id = document.querySelector(".timeline")?.dataset.session;
    try {
      const data = JSON.parse(event.data);
      return (kind === "session" ? data.id : data.session_id) === id;
    } catch (_) {
      return true;
    }
  }

  // EventSource cannot send an Authorization header, so the stream is read with fetch.
  function connect() {
    const live = document.getElementById("live");
    const controller = new AbortController();
    stream = controller;
    const dispatch = (kind, data) => {
      if (kind === "approval") updatePendingCount().catch(() => {});
      if (kind === "freeze") {
        try {
          showFrozenAll(Boolean(JSON.parse(data).all));
        } catch (_) {
          updateFrozenAll().catch(() => {});
        }
        return;
      }
      if (view === "approvals" ? kind === "approval" : concerns(kind, { data })) schedule();
    };
    const offline = () => {
      live.textContent = "reconnecting";
      live.classList.remove("on");
      if (stream === controller) setTimeout(() => stream === controller && connect(), 2000);
    };
    fetch("/api/events", { credentials: "omit", headers: auth(), signal: controller.signal })
      .then(async (response) => {
        if (response.status === 401) return signOut("Signed out: sign in again.");
        if (!response.ok || !response.body) return offline();
        live.textContent = "live";
        live.classList.add("on");
        schedule(); // catch up on anything missed while disconnected
        updateFrozenAll().catch(() => {});
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let kind = "message";
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) kind = line.slice(6).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
            }
            if (data.length) dispatch(kind, data.join("\n"));
          }
        }
        offline();
      })
      .catch(() => {
        if (!controller.signal.aborted) offline();
      });
  }

  async function updatePendingCount(always) {
    if (view === "approvals" && !always) return; // the queue's own refresh counts its cards
    const found = await api("GET", "/api/approvals?state=pending&limit=1");
    document.getElementById("nav-pending").textContent = String(found.total);
  }

  async function refresh() {
    const fresh = await partial();
    if (!fresh || !signedIn) return;
    const main = document.getElementById("main");
    if (!main.dataset.loaded) {
      main.replaceChildren(fresh); // the first time: there is nothing on screen to keep
      main.dataset.loaded = "1";
      highlight();
    } else if (view === "approvals") mergeQueue(fresh);
    else if (view === "timeline") mergeTimeline(fresh);
    else document.getElementById("main").replaceChildren(fresh);
    localize(document);
    tick();
  }

  // Cards already on screen stay as they are (a half-typed reason, a ticked box survive);
  // new ones come in at the top, decided ones leave.
  function mergeQueue(fresh) {
    const queue = document.getElementById("queue");
    const incoming = [...fresh.querySelectorAll("#queue > .card")];
    const ids = new Set(incoming.map((card) => card.dataset.id));
    for (const card of [...queue.children]) if (!ids.has(card.dataset.id)) card.remove();
    let previous = null;
    for (const card of incoming) {
      let node = document.getElementById(card.id);
      if (!node) {
        node = card;
        node.classList.add("arrived");
      } else if (node.dataset.version !== card.dataset.version) {
        card.querySelector(".reason").value = node.querySelector(".reason").value;
        card.querySelector(".select").checked = node.querySelector(".select").checked;
        node.replaceWith(card);
        node = card;
      }
      const inPlace = previous ? previous.nextElementSibling === node : queue.firstElementChild === node;
      if (!inPlace) {
        if (previous) previous.after(node);
        else queue.prepend(node);
      }
      previous = node;
    }
    document.getElementById("decided").replaceChildren(...fresh.querySelector("#decided").childNodes);
    const pager = document.querySelector(".queue .pager");
    const nextPager = fresh.querySelector(".queue .pager");
    if (pager) pager.remove();
    if (nextPager) queue.after(nextPager);
    // Every one waiting, also those past this page's cards.
    const count = fresh.querySelector("#queue")?.dataset.total || String(incoming.length);
    document.getElementById("pending-count").textContent = count;
    document.getElementById("nav-pending").textContent = count;
    document.getElementById("queue-empty").hidden = count !== "0";
    highlight();
  }

  function mergeTimeline(fresh) {
    for (const selector of ["#timeline-steps", ".timeline h1", ".timeline .facts"]) {
      const now = document.querySelector(selector);
      const next = fresh.querySelector(selector);
      if (now && next) now.replaceWith(next);
    }
    const button = document.getElementById("rollback");
    const next = fresh.querySelector("#rollback");
    if (button && next && !button.classList.contains("busy")) button.disabled = next.disabled;
    const freeze = document.getElementById("freeze");
    const nextFreeze = fresh.querySelector("#freeze");
    if (freeze && nextFreeze && !freeze.classList.contains("busy")) {
      freeze.dataset.frozen = nextFreeze.dataset.frozen;
      freeze.textContent = nextFreeze.textContent;
    }
  }

  function highlight() {
    const match = location.hash.match(/^#approval\/(.+)$/);
    if (!match) return;
    const id = decodeURIComponent(match[1]);
    const node = document.getElementById(`approval-${id}`) || document.getElementById(`decided-${id}`);
    if (node && !node.classList.contains("highlight")) {
      node.classList.add("highlight");
      node.scrollIntoView({ block: "center" });
    }
  }

  // --- decisions -----------------------------------------------------------------------

  function decide(id, verdict, reason) {
    return api("POST", `/api/approvals/${encodeURIComponent(id)}/${verdict}`, reason ? { reason } : {});
  }

  async function decideCard(card, verdict) {
    const input = card.querySelector(".reason");
    const error = card.querySelector(".error");
    const reason = input.value.trim();
    if (card.dataset.reasonRequired && !reason) {
      showError(error, "This request is critical risk: give a reason first.");
      input.focus();
      return;
    }
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    try {
      await decide(card.dataset.id, verdict, reason);
      card.classList.add(verdict === "approve" ? "approved" : "denied");
      showError(error, "");
      schedule();
    } catch (e) {
      showError(error, e.message);
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  }

  async function batch(verdict) {
    const ids = [...document.querySelectorAll("#queue .select:checked")].map((box) => box.value);
    const error = document.getElementById("batch-error");
    if (!ids.length) {
      showError(error, "Select at least one request first.");
      return;
    }
    const reason = document.getElementById("batch-reason").value.trim();
    const word = verdict === "approve" ? "Approve" : "Deny";
    if (ids.length >= 3 && !confirm(`${word} ${ids.length} held requests?`)) return;
    const failed = [];
    for (const id of ids) {
      try {
        await decide(id, verdict, reason);
      } catch (e) {
        failed.push(`${id}: ${e.message}`);
      }
    }
    showError(error, failed.join("\n"));
    document.getElementById("select-all").checked = false;
    schedule();
  }

  // --- rollback ------------------------------------------------------------------------

  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function renderReport(box, report) {
    const title = document.createElement("h2");
    title.textContent = `Rollback: ${String(report.state).replace(/_/g, " ")}`;
    const table = document.createElement("table");
    table.className = "grid";
    const head = table.createTHead().insertRow();
    for (const name of ["Step", "Result", "Detail"]) {
      const th = document.createElement("th");
      th.textContent = name;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const step of report.steps || []) {
      const row = body.insertRow();
      row.dataset.step = step.id;
      const known = document.getElementById(`step-${step.id}`)?.dataset || {};
      const seq = step.seq ?? known.seq;
      const what = [seq ? `#${seq}` : step.id, step.method ?? known.method, step.url ?? known.url];
      cell(row, what.filter(Boolean).join(" "));
      const status = document.createElement("span");
      status.className = `state state-${step.status}`;
      status.textContent = step.status;
      row.insertCell().appendChild(status);
      cell(row, step.detail || "");
    }
    if (!(report.steps || []).length) cell(body.insertRow(), "No mutations to undo.");
    box.replaceChildren(title, table);
    box.hidden = false;
  }

  async function rollback(button) {
    const id = button.dataset.session;
    const question = `Roll back session ${id}? Every mutation it made is undone, newest first.`;
    if (!confirm(question)) return;
    const error = document.getElementById("rollback-error");
    button.disabled = true;
    button.classList.add("busy");
    button.textContent = "Rolling back…";
    try {
      renderReport(document.getElementById("rollback-result"), await api("POST", `/api/sessions/${encodeURIComponent(id)}/rollback`, {}));
      showError(error, "");
    } catch (e) {
      showError(error, `Rollback failed: ${e.message}`);
    } finally {
      button.classList.remove("busy");
      button.textContent = "Roll back";
      schedule();
    }
  }

  // --- kill switch ---------------------------------------------------------------------

  function showFrozenAll(on) {
    const button = document.getElementById("freeze-all");
    document.getElementById("frozen-all").hidden = !on;
    if (button.classList.contains("busy")) return;
    button.dataset.frozen = on ? "1" : "";
    button.textContent = on ? "Unfreeze all" : "Freeze all";
  }

  async function updateFrozenAll() {
    const info = await api("GET", "/api/info");
    showFrozenAll(Boolean(info.frozen_all));
  }

  async function freezeAll(button) {
    const on = !button.dataset.frozen;
    const question = on
      ? "Freeze every session? Every mutation is refused (403) and every held request denied until you unfreeze; reads still pass."
      : "Unfreeze every session? Mutations go through the rules again (sessions frozen one by one stay frozen).";
    if (!confirm(question)) return;
    const error = document.getElementById("freeze-all-error");
    button.disabled = true;
    button.classList.add("busy");
    try {
      const answer = await api("POST", on ? "/api/freeze" : "/api/unfreeze", {});
      button.classList.remove("busy");
      showFrozenAll(answer.frozen_all);
      showError(error, "");
    } catch (e) {
      showError(error, `${on ? "Freeze" : "Unfreeze"} failed: ${e.message}`);
    } finally {
      button.classList.remove("busy");
      button.disabled = false;
    }
  }

  async function freezeSession(button) {
    const id = button.dataset.session;
    const on = !button.dataset.frozen;
    const question = on
      ? `Freeze session ${id}? Its mutations are refused (403) and its held requests denied until you unfreeze it; reads still pass.`
      : `Unfreeze session ${id}? Its mutations go through the rules again.`;
    if (!confirm(question)) return;
    const error = document.getElementById("freeze-error");
    button.disabled = true;
    button.classList.add("busy");
    try {
      const verb = on ? "freeze" : "unfreeze";
      const answer = await api("POST", `/api/sessions/${encodeURIComponent(id)}/${verb}`, {});
      button.dataset.frozen = answer.frozen ? "1" : "";
      button.textContent = answer.frozen ? "Unfreeze" : "Freeze";
      showError(error, "");
    } catch (e) {
      showError(error, `${on ? "Freeze" : "Unfreeze"} failed: ${e.message}`);
    } finally {
      button.classList.remove("busy");
      button.disabled = false;
      schedule();
    }
  }

  // --- resolving a step a person undid by hand -----------------------------------------

  async function resolveStep(button) {
    const id = button.dataset.step;
    const known = document.getElementById(`step-${id}`)?.dataset || {};
    const what = [known.seq ? `#${known.seq}` : id, known.method, known.url].filter(Boolean).join(" ");
    const reason = prompt(`Resolve step ${what}: how was it undone by hand? (recorded with your name)`);
    if (reason === null) return;
    const error = document.getElementById("resolve-error");
    if (!reason.trim()) {
      showError(error, "Give a reason to resolve a step: how it was undone.");
      return;
    }
    button.disabled = true;
    try {
      await api("POST", `/api/steps/${encodeURIComponent(id)}/resolve`, { reason: reason.trim() });
      showError(error, "");
    } catch (e) {
      showError(error, `Resolve failed: ${e.message}`);
      button.disabled = false;
    } finally {
      schedule();
    }
  }

  // --- wiring --------------------------------------------------------------------------

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button) return;
    const card = button.closest(".card");
    if (card && (button.classList.contains("approve") || button.classList.contains("deny"))) {
      decideCard(card, button.classList.contains("approve") ? "approve" : "deny");
    } else if (button.dataset.batch) {
      batch(button.dataset.batch);
    } else if (button.id === "rollback") {
      rollback(button);
    } else if (button.id === "freeze") {
      freezeSession(button);
    } else if (button.id === "freeze-all") {
      freezeAll(button);
    } else if (button.classList.contains("resolve") && button.dataset.step) {
      resolveStep(button);
    }
  });

  document.addEventListener("change", (event) => {
    if (event.target.id !== "select-all") return;
    for (const box of document.querySelectorAll("#queue .select")) box.checked = event.target.checked;
  });

  window.addEventListener("hashchange", highlight);
  setInterval(tick, 1000);

  function start() {
    document.getElementById("nav").hidden = false;
    document.getElementById("who").hidden = false;
    document.getElementById("kill").hidden = false;
    document.getElementById("user").textContent = signedIn.name;
    document.getElementById("signout").onclick = signOutClicked;
    document.title = title;
    refresh();
    updatePendingCount(true).catch(() => {});
    connect();
  }

  if (signedIn && signedIn.key) start();
  else showSignin("");
})();
