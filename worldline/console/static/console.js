// The worldline console: reads /console/api/snapshot with the bearer token, and reads
// it again whenever /console/api/events says the world's change feed moved.
"use strict";
(function () {
  const KEY = "worldline-console-token";
  const $ = (id) => document.getElementById(id);
  let token = "";
  let shown = new Set();

  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem(KEY, fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  token = sessionStorage.getItem(KEY) || "";

  function num(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }
  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }
  function fill(tableId, rows, render) {
    const body = $(tableId).querySelector("tbody");
    body.replaceChildren();
    if (!rows || !rows.length) {
      const tr = document.createElement("tr");
      const td = cell(tr, "none yet", "none");
      td.colSpan = $(tableId).querySelectorAll("thead th").length;
      body.appendChild(tr);
    }
    for (const item of rows || []) {
      const tr = document.createElement("tr");
      render(tr, item);
      body.appendChild(tr);
    }
  }
  function when(iso) { return iso ? iso.replace("T", " ").slice(0, 19) : ""; }

  async function api(path) {
    const reply = await fetch(path, { headers: { Authorization: "Bearer " + token } });
    if (reply.status === 401) { logout("that token was refused (401)"); throw new Error("401"); }
    if (!reply.ok) throw new Error(path + ": HTTP " + reply.status);
    return reply.json();
  }

  function logout(why) {
    sessionStorage.removeItem(KEY);
    token = "";
    $("panels").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = why || "";
  }

  function render(s) {
    $("world").textContent = s.world;
    $("viewer").textContent = "as " + s.viewer;
    $("updated").textContent = "read " + when(s.at) + " UTC";
    for (const p of document.querySelectorAll("[data-error]")) {
      p.textContent = s.errors[p.dataset.error] || "";
    }
    const beliefs = s.beliefs || [];
    $("belief-count").textContent = "(" + beliefs.length + ")";
    const before = shown;
    shown = new Set(beliefs.map((b) => b.id + "@" + b.version));
    fill("beliefs", beliefs, (tr, b) => {
      tr.dataset.id = b.id;
      if (before.size && !before.has(b.id + "@" + b.version)) tr.className = "fresh";
      cell(tr, b.text).title = b.id;
      cell(tr, b.type);
      const c = cell(tr, "", "num");
      if (b.confidence !== undefined && b.confidence !== null) {
        const bar = document.createElement("span");
        bar.className = "bar";
        bar.style.width = Math.round(b.confidence * 60) + "px";
        c.append(bar, num(b.confidence, 2));
      } else c.textContent = "–";
      cell(tr, num(b.uncertainty, 3), "num");
      cell(tr, num(b.evidence_weight, 2), "num");
      cell(tr, (b.flags || []).join(", "));
      cell(tr, b.status || "active");
      cell(tr, when(b.updated_at));
      tr.addEventListener("click", () => detail(b.id));
    });
    fill("contradictions", s.contradictions, (tr, c) => {
      cell(tr, c.id); cell(tr, c.kind); cell(tr, (c.beliefs || []).join(", "));
      cell(tr, num(c.strength, 2), "num"); cell(tr, c.status || "open");
      cell(tr, when(c.opened_at)); cell(tr, when(c.resolved_at));
      cell(tr, [c.winner, c.reason].filter(Boolean).join(": "));
    });
    fill("sources", (s.sources || {}).sources, (tr, r) => {
      cell(tr, r.source);
      cell(tr, r.trust === undefined ? "–" : num(r.trust, 2) + (r.locked ? " (locked)" : ""), "num");
      cell(tr, r.accuracy === undefined ? "not assessed" : num(r.accuracy, 2) + " (x" + num(r.learned, 2) + ")", "num");
      cell(tr, num(r.independence === undefined ? 1 : r.independence, 2), "num");
      cell(tr, r.claims || 0, "num");
      cell(tr, num(r.weight === undefined ? 1 : r.weight, 2), "num");
    });
    const cal = s.calibration;
    $("calibration-summary").textContent = cal
      ? "recalibration: " + (cal.method || "identity") +
        (cal.fitted_on
          ? ", fitted on " + cal.fitted_on + " resolved beliefs"
          : " (a fit starts at " + (cal.min_records || 0) + " resolved beliefs)")
      : "";
    const groups = cal ? [cal.world].concat(cal.by_source || [], cal.by_agent || []) : [];
    fill("calibration", groups, (tr, g) => {
      cell(tr, g.name); cell(tr, g.count, "num"); cell(tr, num(g.brier, 3), "num");
      cell(tr, num(g.ece, 3), "num"); cell(tr, num(g.mean_confidence, 2), "num");
      cell(tr, num(g.frequency, 2), "num");
    });
    fill("agents", s.agents, (tr, a) => {
      cell(tr, a.agent);
      cell(tr, a.present ? (a.status || "present") + " (" + when(a.seen_at) + ")" : "absent");
      cell(tr, a.task); cell(tr, a.inbox_pending, "num"); cell(tr, (a.work || []).join(", "));
      const pre = document.createElement("pre");
      pre.textContent = a.worldview;
      cell(tr, "").appendChild(pre);
    });
    fill("actors", s.actors, (tr, a) => {
      cell(tr, a.instance); cell(tr, a.state); cell(tr, a.lag === null ? "–" : a.lag, "num");
      cell(tr, a.dead_letters, "num");
      cell(tr, a.heartbeat_age_seconds === null ? "–" : num(a.heartbeat_age_seconds, 0) + " s", "num");
      cell(tr, a.host);
    });
  }

  let open = "";
  async function detail(id) {
    open = id;
    const t = await api("/console/api/beliefs/" + encodeURIComponent(id));
    $("detail").hidden = false;
    const b = t.belief || {};
    $("detail-text").textContent = b.text || id;
    $("detail-summary").textContent = [
      "posterior " + num(b.confidence, 2),
      "uncertainty " + num(b.uncertainty, 3),
      "evidence weight " + num(b.evidence_weight, 2) + " (" + (b.evidence_count || 0) + " items)",
      "fragility " + num(b.fragility, 2),
      "prior " + num(b.prior, 2),
      "status " + (b.status || "active") + (b.closed_reason ? ": " + b.closed_reason : ""),
      "created " + when(b.created_at) + " by " + b.author,
    ].join(" · ");
    fill("trace", t.steps, (tr, step) => {
      const e = step.evidence || {};
      cell(tr, when(e.observed_at)); cell(tr, e.source); cell(tr, e.kind);
      cell(tr, e.direction || ""); cell(tr, num(step.before, 3), "num");
      cell(tr, num(step.after, 3), "num");
    });
  }

  let reading = null;
  let again = false;
  async function refresh() {
    if (reading) { again = true; return reading; }
    reading = (async () => {
      try {
        render(await api("/console/api/snapshot"));
        if (open) await detail(open);
      }
      catch (err) { if (String(err) !== "Error: 401") $("updated").textContent = String(err); }
    })();
    await reading;
    reading = null;
    if (again) { again = false; return refresh(); }
  }

  // Server-sent events over fetch (EventSource cannot send the token header).
  async function follow() {
    while (token) {
      try {
        const reply = await fetch("/console/api/events", {
          headers: { Authorization: "Bearer " + token, Accept: "text/event-stream" },
        });
        if (reply.status === 401) { logout("that token was refused (401)"); return; }
        const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
        $("live").className = "on"; $("live").textContent = "live";
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (/^event: change$/m.test(block)) {
              const live = $("live");
              live.dataset.changes = String(Number(live.dataset.changes || 0) + 1);
              live.title = live.dataset.changes + " changes on the feed since the page opened";
            }
            if (/^event: (change|hello)$/m.test(block)) {
              refresh();
              setTimeout(refresh, 1000); // the projector may apply a moment later
            }
          }
        }
      } catch (err) { /* the gateway went away: try again */ }
      $("live").className = "off"; $("live").textContent = "offline";
      await new Promise((r) => setTimeout(r, 2000));
    }
  }

  function start() {
    $("login").hidden = true;
    $("panels").hidden = false;
    refresh();
    follow();
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem(KEY, token);
    start();
  });
  setInterval(() => { if (token) refresh(); }, 10000); // presence and actors move off the feed
  if (token) start(); else logout("");
})();
