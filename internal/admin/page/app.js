// Manifold admin page.
//
// Everything the admin API answers is untrusted: tool names and descriptions come from
// upstream servers, arguments and principals from clients, and error messages may quote
// either. So the DOM is built with createElement and textContent only, never by parsing
// markup, and data goes into URLs only through encodeURIComponent. The page's Content Security
// Policy forbids inline scripts and handlers as a second line.
"use strict";

(() => {
  const KEY_STORAGE = "manifold.adminKey";
  const REFRESH_MS = 3000;
  const URGENT_MS = 30000;

  const $ = (id) => document.getElementById(id);

  // The admin key, also kept in sessionStorage ("" when signed out).
  let key = "";
  // Bumped at each sign-in and sign-out: answers that belong to an older one are dropped.
  let epoch = 0;
  let timer = 0;
  // The refresh in flight ({epoch}), and whether another was asked for meanwhile.
  let refreshing = null;
  let again = false;
  // The gateway's clock minus ours, in ms, from the answers' Date header (0 when close).
  let skew = 0;
  // Per section, the JSON last rendered: a section is rebuilt only when its data changed, so
  // that a refresh does not pull a button from under the operator's pointer.
  let last = {};
  // The last catalog, for the filter.
  let catalog = [];
  // How many pages of grants the operator asked to see: each refresh loads as many again.
  let grantPages = 1;

  // ---- API ----

  class APIError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json", Authorization: "Bearer " + key };
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, "the gateway did not answer (" + str(e && e.message) + ")");
    }
    const date = Date.parse(res.headers.get("Date") || "");
    if (!Number.isNaN(date)) {
      const d = date - Date.now();
      skew = Math.abs(d) > 2000 ? d : 0;
    }
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    if (!res.ok) {
      const msg = data && typeof data.error === "string" ? data.error : "HTTP " + res.status;
      throw new APIError(res.status, msg);
    }
    if (data === null || typeof data !== "object") {
      throw new APIError(res.status, "the gateway's answer is not JSON");
    }
    return data;
  }

  // ---- Sign-in ----

  function storedKey() {
    try {
      return sessionStorage.getItem(KEY_STORAGE) || "";
    } catch {
      return "";
    }
  }

  function storeKey(k) {
    try {
      if (k) sessionStorage.setItem(KEY_STORAGE, k);
      else sessionStorage.removeItem(KEY_STORAGE);
    } catch {
      // Storage is off: the key lives as long as the page.
    }
  }

  async function signIn(candidate) {
    const my = ++epoch;
    key = candidate;
    again = false;
    $("signin-submit").disabled = true;
    let who;
    try {
      who = await api("GET", "api/whoami");
    } catch (e) {
      if (my !== epoch) return;
      key = "";
      if (e.status === 401 || e.status === 403) storeKey("");
      showSignIn(e.status === 401 || e.status === 403 ? "The key was refused: " + e.message : "Could not check the key: " + e.message);
      return;
    } finally {
      $("signin-submit").disabled = false;
    }
    if (my !== epoch) return;
    storeKey(key);
    $("admin-name").textContent = str(who.admin);
    $("key").value = "";
    $("signin").hidden = true;
    $("who").hidden = false;
    $("dashboard").hidden = false;
    setStatus("", "");
    refresh();
  }

  function signOut(message) {
    epoch++;
    key = "";
    again = false;
    storeKey("");
    clearTimeout(timer);
    last = {};
    catalog = [];
    grantPages = 1;
    for (const id of ["approvals-body", "changes-body", "config-body", "upstreams-body", "catalog-body", "sessions-body", "grants-body"]) {
      $(id).replaceChildren();
    }
    $("admin-name").textContent = "";
    showSignIn(message);
  }

  function showSignIn(message) {
    $("dashboard").hidden = true;
    $("who").hidden = true;
    $("signin").hidden = false;
    const err = $("signin-error");
    err.textContent = message || "";
    err.hidden = !message;
    $("key").focus();
  }

  // ---- Refresh ----

  const sections = [
    { id: "approvals", path: "api/approvals", render: (d) => renderApprovals(arr(d.approvals)) },
    { id: "changes", path: "api/pins", render: (d) => renderChanges(arr(d.pins)) },
    { id: "config", path: "api/config", render: (d) => renderConfig(arr(d.replicas), d.agree === true) },
    { id: "upstreams", path: "api/upstreams", render: (d) => renderUpstreams(arr(d.upstreams)) },
    { id: "catalog", path: "api/catalog", render: (d) => renderCatalog(arr(d.tools)) },
    { id: "sessions", path: "api/sessions", render: (d) => renderSessions(arr(d.sessions), Date.now()) },
    { id: "grants", load: loadGrants, render: (d) => renderGrants(arr(d.grants), str(d.next)) },
  ];

  async function refresh() {
    if (!key) return;
    const my = epoch;
    if (refreshing && refreshing.epoch === my) {
      again = true;
      return;
    }
    clearTimeout(timer);
    const run = { epoch: my };
    refreshing = run;
    try {
      await load(my);
    } finally {
      if (refreshing === run) refreshing = null;
      if (my === epoch && refreshing === null) {
        if (again) {
          again = false;
          refresh();
        } else {
          timer = setTimeout(refresh, REFRESH_MS);
        }
      }
    }
  }

  async function load(my) {
    const results = await Promise.allSettled(sections.map((s) => (s.load ? s.load() : api("GET", s.path))));
    if (my !== epoch) return;
    const refused = results.find((r) => r.status === "rejected" && r.reason.status === 401);
    if (refused) {
      signOut("Signed out: " + refused.reason.message);
      return;
    }
    sections.forEach((s, i) => {
      const r = results[i];
      const err = $(s.id).querySelector("[data-error]");
      if (r.status === "fulfilled") {
        err.hidden = true;
        err.textContent = "";
        s.render(r.value);
      } else {
        err.textContent = "Could not load: " + r.reason.message;
        err.hidden = false;
      }
    });
    $("updated").textContent = "updated " + clock(Date.now());
    tick();
  }

  // loadGrants reads the grants a page at a time, following next for as many pages as are
  // shown, and answers as one page would: the grants and the cursor after the last read.
  async function loadGrants() {
    const first = await api("GET", "api/grants");
    let grants = arr(first.grants);
    let next = str(first.next);
    for (let page = 1; page < grantPages && next; page++) {
      const d = await api("GET", "api/grants?cursor=" + encodeURIComponent(next));
      grants = grants.concat(arr(d.grants));
      next = str(d.next);
    }
    return { grants, next };
  }

  // changed reports whether a section's data differs from what it shows.
  function changed(name, data) {
    const j = JSON.stringify(data);
    if (last[name] === j) return false;
    last[name] = j;
    return true;
  }

  // ---- Actions ----

  async function act(buttons, what, call, done) {
    for (const b of buttons) b.disabled = true;
    setStatus(what + "…", "");
    try {
      await call();
      setStatus(done, "ok");
    } catch (e) {
      if (e.status === 401) {
        signOut("Signed out: " + e.message);
        return;
      }
      setStatus(what + " failed" + (e.status ? " (" + e.status + ")" : "") + ": " + e.message, "error");
    } finally {
      for (const b of buttons) b.disabled = false;
    }
    refresh();
  }

  function decide(a, decision, buttons) {
    const verb = decision === "approve" ? "Approve" : "Deny";
    const name = str(a.tool || a.original);
    act(buttons, verb + " the call to " + name,
      () => api("POST", "api/approvals/" + encodeURIComponent(str(a.id)), { decision }),
      (decision === "approve" ? "Approved" : "Denied") + " the call to " + name + ".");
  }

  function resolve(p, decision, buttons) {
    const verb = decision === "accept" ? "Accept" : "Reject";
    const name = str(p.upstream) + "/" + str(p.tool);
    act(buttons, verb + " the change of " + name,
      () => api("POST", "api/pins/" + encodeURIComponent(str(p.upstream)) + "/" + encodeURIComponent(str(p.tool)),
        { decision, hash: str(p.change.hash) }),
      (decision === "accept" ? "Accepted" : "Rejected") + " the change of " + name + ".");
  }

  function revokeGrant(g, button) {
    const p = g.principal || {};
    const name = str(p.sub) + "'s grant at " + str(g.upstream);
    if (!window.confirm("Revoke " + name + "?\n\nThe gateway asks " + (str(g.issuer) || "the upstream's authorization server") +
      " to revoke the token and forgets the grant; the user must connect " + str(g.upstream) + " again to use it.")) {
      return;
    }
    act([button], "Revoke " + name,
      () => api("POST", "api/grants/revoke", { principal: { iss: str(p.iss), sub: str(p.sub) }, upstream: str(g.upstream) }),
      "Revoked " + name + ".");
  }

  function setStatus(message, kind) {
    const s = $("status");
    s.textContent = message ? clock(Date.now()) + " — " + message : "";
    s.className = "status" + (kind ? " " + kind : "");
    s.hidden = !message;
  }

  // ---- Sections ----

  function renderApprovals(list) {
    setCount("approvals-count", list.length);
    if (!changed("approvals", list)) return;
    $("approvals-body").replaceChildren(list.length ? el("div", { class: "cards" }, ...list.map(approvalCard))
      : empty("No calls are waiting for a decision."));
  }

  function approvalCard(a) {
    const approve = el("button", { type: "button", class: "approve", "data-approve": str(a.id), text: "Approve" });
    const deny = el("button", { type: "button", class: "deny", "data-deny": str(a.id), text: "Deny" });
    const buttons = [approve, deny];
    approve.addEventListener("click", () => decide(a, "approve", buttons));
    deny.addEventListener("click", () => decide(a, "deny", buttons));
    return el("article", { class: "card", "data-approval": str(a.id) },
      el("div", { class: "card-head" },
        el("div", { class: "card-title" },
          el("code", { class: "name", text: str(a.tool || a.original) }),
          el("span", { class: "muted", text: str(a.upstream) + " / " + str(a.original) })),
        el("div", { class: "actions" },
          el("span", { class: "deadline", "data-deadline": String(Date.parse(str(a.deadline))) }),
          approve, deny)),
      el("dl", { class: "facts" },
        ...fact("Principal", text(a.principal)),
        ...fact("Session", el("code", { text: str(a.session) })),
        ...fact("Rule", text(a.rule)),
        ...fact("Held", text(stamp(Date.parse(str(a.held))))),
        ...fact("Annotations", annotations(a.annotations))),
      el("div", { class: "label", text: "Arguments" }),
      // The server's text of the arguments: JSON.parse would round large numbers.
      el("pre", { class: "json", text: a.argumentsText || pretty(a.arguments) }));
  }

  function annotations(v) {
    if (v === undefined || v === null) return el("span", { class: "muted", text: "none" });
    if (typeof v !== "object" || Array.isArray(v)) return el("code", { text: JSON.stringify(v) });
    const entries = Object.entries(v);
    if (!entries.length) return el("span", { class: "muted", text: "none" });
    return el("span", { class: "chips" }, ...entries.map(([k, val]) => {
      const warn = val === true && (k === "destructiveHint" || k === "openWorldHint");
      return el("span", { class: "chip" + (warn ? " warn" : ""), text: val === true ? k : k + ": " + (typeof val === "string" ? val : JSON.stringify(val)) });
    }));
  }

  function renderChanges(pins) {
    const list = pins.filter((p) => p && p.change && !p.change.rejected);
    setCount("changes-count", list.length);
    if (!changed("changes", list)) return;
    $("changes-body").replaceChildren(list.length ? el("div", { class: "cards" }, ...list.map(changeCard))
      : empty("No tool definition changed since it was pinned."));
  }

  function changeCard(p) {
    const target = str(p.upstream) + "/" + str(p.tool);
    const accept = el("button", { type: "button", class: "approve", "data-accept": target, text: "Accept" });
    const reject = el("button", { type: "button", class: "deny", "data-reject": target, text: "Reject" });
    const buttons = [accept, reject];
    accept.addEventListener("click", () => resolve(p, "accept", buttons));
    reject.addEventListener("click", () => resolve(p, "reject", buttons));
    const rows = arr(p.change.diff).map((f) => el("tr", {},
      el("td", {}, el("code", { text: str(f && f.field) })),
      el("td", {}, jsonCell(f && f.before)),
      el("td", {}, jsonCell(f && f.after))));
    return el("article", { class: "card", "data-pin": target },
      el("div", { class: "card-head" },
        el("div", { class: "card-title" },
          el("code", { class: "name", text: str(p.tool) }),
          el("span", { class: "muted", text: "on " + str(p.upstream) }),
          p.withheld ? el("span", { class: "badge bad", text: "withheld from clients" }) : null),
        el("div", { class: "actions" }, accept, reject)),
      el("dl", { class: "facts" },
        ...fact("Pinned", text(short(p.hash) + " · " + stamp(Date.parse(str(p.pinned))))),
        ...fact("Now", text(short(p.change.hash) + " · seen " + stamp(Date.parse(str(p.change.seen)))))),
      el("table", { class: "diff" },
        el("thead", {}, el("tr", {}, el("th", { text: "Field" }), el("th", { text: "Before" }), el("th", { text: "After" }))),
        el("tbody", {}, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: "3", class: "muted", text: "No field listed." }))]))));
  }

  function jsonCell(v) {
    if (v === undefined) return el("span", { class: "muted", text: "absent" });
    return el("pre", { class: "json", text: typeof v === "string" ? v : JSON.stringify(v, null, 2) });
  }

  const stateClass = { ready: "ok", starting: "info", backoff: "bad", stopped: "off" };

  // renderConfig shows the configuration each replica runs: an operator sees at a glance
  // whether they all run the same version, and why one refused a reload.
  function renderConfig(list, agree) {
    $("config-count").textContent = list.length > 1 ? (agree ? "all on one version" : "versions differ") : "";
    if (!changed("config", list)) return;
    $("config-body").replaceChildren(table(
      ["Replica", "Version", "Since", "Last reload", "Refused because"],
      list.map((c) => el("tr", { "data-replica": str(c.replica) },
        el("td", { class: "nowrap" }, el("strong", { text: str(c.replica) || "this gateway" }), c.this && c.replica ? text(" (this one)") : null),
        el("td", {}, el("code", { text: str(c.version) })),
        el("td", { class: "nowrap", text: stamp(Date.parse(str(c.since))) }),
        el("td", { class: "nowrap", text: c.lastReload ? stamp(Date.parse(str(c.lastReload))) : "—" }),
        el("td", { class: "error-text", text: str(c.lastError) })))));
  }

  function reload(button) {
    act([button], "Reload the configuration of every replica", () => api("POST", "api/reload"),
      "Reloaded the configuration; every replica applies its own files and shows its version here.");
  }

  function renderUpstreams(list) {
    setCount("upstreams-count", list.length);
    if (!changed("upstreams", list)) return;
    if (!list.length) {
      $("upstreams-body").replaceChildren(empty("No upstream is configured."));
      return;
    }
    $("upstreams-body").replaceChildren(table(
      ["Name", "Transport", "Isolation", "State", "Tools", "Prompts", "Resources", "Withheld", "Error"],
      list.map((u) => el("tr", { "data-upstream": str(u.name) },
        el("td", { class: "nowrap" }, el("strong", { text: str(u.name) })),
        el("td", { class: "nowrap", text: str(u.transport) }),
        el("td", { class: "nowrap", text: str(u.isolation) }),
        el("td", {}, el("span", { class: "badge " + (stateClass[u.state] || "off"), text: str(u.state) || "unknown" })),
        el("td", { class: "num", text: str(u.tools) }),
        el("td", { class: "num", text: str(u.prompts) }),
        el("td", { class: "num", text: str(u.resources) }),
        el("td", { class: "num" + (u.withheld > 0 ? " warn-text" : ""), text: str(u.withheld) }),
        el("td", { class: "error-text", text: str(u.error) })))));
  }

  function renderCatalog(list) {
    catalog = list;
    if (!changed("catalog", list)) return;
    drawCatalog();
  }

  function drawCatalog() {
    const q = $("catalog-filter").value.trim().toLowerCase();
    const shown = q ? catalog.filter((t) => [t.name, t.original, t.upstream, t.title, t.description]
      .some((s) => str(s).toLowerCase().includes(q))) : catalog;
    setCount("catalog-count", q ? shown.length + " of " + catalog.length : catalog.length);
    if (!shown.length) {
      $("catalog-body").replaceChildren(empty(catalog.length ? "No tool matches the filter." : "The catalog is empty."));
      return;
    }
    $("catalog-body").replaceChildren(table(["Tool", "Upstream", "Description", ""],
      shown.map((t) => el("tr", { "data-tool": str(t.upstream) + "/" + str(t.original), class: t.withheld ? "withheld" : "" },
        el("td", {},
          el("code", { class: "name", text: str(t.name || t.original) }),
          t.title ? el("div", { class: "muted", text: str(t.title) }) : null,
          t.name && t.original && !str(t.name).endsWith(str(t.original)) ? el("div", { class: "muted small", text: "upstream name " + str(t.original) }) : null),
        el("td", { text: str(t.upstream) }),
        el("td", { class: "description", text: str(t.description) }),
        el("td", {}, t.withheld ? el("span", { class: "badge bad", text: "withheld" }) : null)))));
  }

  function renderSessions(list, received) {
    setCount("sessions-count", list.length);
    // The age changes at every answer: show it from the time it was received, and tick it.
    const stable = list.map((s) => ({ ...s, ageSeconds: undefined }));
    if (!changed("sessions", stable)) return;
    if (!list.length) {
      $("sessions-body").replaceChildren(empty("No client session is open."));
      return;
    }
    $("sessions-body").replaceChildren(table(["Fingerprint", "Principal", "Client", "Profile", "Protocol", "Age"],
      list.map((s) => el("tr", {},
        el("td", {}, el("code", { text: str(s.fingerprint) })),
        el("td", { text: str(s.principal) }),
        el("td", { text: str(s.client) }),
        el("td", { text: str(s.profile) }),
        el("td", { text: str(s.protocolVersion) }),
        el("td", { class: "num", "data-since": String(received - Number(s.ageSeconds) * 1000) })))));
  }

  function renderGrants(list, next) {
    setCount("grants-count", next ? list.length + "+" : list.length);
    if (!changed("grants", { list, next })) return;
    if (!list.length) {
      $("grants-body").replaceChildren(empty("No user has connected an upstream (credentials.user_oauth)."));
      return;
    }
    const more = next ? el("button", { type: "button", class: "secondary", id: "grants-more", text: "More" }) : null;
    if (more) {
      more.addEventListener("click", () => {
        grantPages++;
        refresh();
      });
    }
    $("grants-body").replaceChildren(table(["User", "Upstream", "Scopes", "Granted", "Token expiry", "Refreshable", ""], list.map(grantRow)),
      more ? el("div", { class: "more" }, more) : null);
  }

  function grantRow(g) {
    const p = g.principal || {};
    const target = str(p.iss) + " " + str(p.sub) + " " + str(g.upstream);
    // A grant that does not open may be listed without its user: nothing names it to revoke.
    let revoke = null;
    if (p.iss && p.sub && g.upstream) {
      revoke = el("button", { type: "button", class: "deny", "data-revoke": target, text: "Revoke" });
      revoke.addEventListener("click", () => revokeGrant(g, revoke));
    }
    const refreshed = Date.parse(str(g.refreshed));
    return el("tr", { "data-grant": target, class: g.unreadable ? "unreadable" : "" },
      el("td", {},
        p.sub ? el("strong", { text: str(p.sub) }) : el("span", { class: "muted", text: "unknown user" }),
        p.iss ? el("div", { class: "muted small", text: str(p.iss) }) : null),
      el("td", { class: "nowrap", text: str(g.upstream) || "—" }),
      el("td", {}, g.unreadable ? el("span", { class: "badge bad", title: "The stored grant cannot be opened (changed, or sealed with a key no longer configured): revoke it; the user connects again.", text: "unreadable" })
        : arr(g.scopes).length ? el("span", { class: "chips" }, ...arr(g.scopes).map((s) => el("span", { class: "chip", text: str(s) })))
          : el("span", { class: "muted", text: "none" })),
      el("td", { class: "nowrap" }, text(stamp(Date.parse(str(g.granted)))),
        refreshed > 0 ? el("div", { class: "muted small", text: "refreshed " + stamp(refreshed) }) : null),
      el("td", { class: "nowrap", text: stamp(Date.parse(str(g.expiry))) }),
      el("td", {}, g.unreadable ? null : el("span", { class: "badge " + (g.refreshable ? "ok" : "off"), text: g.refreshable ? "yes" : "no" })),
      el("td", { class: "nowrap" }, revoke));
  }

  // tick updates the countdowns and ages.
  function tick() {
    if ($("dashboard").hidden) return;
    const now = Date.now();
    for (const e of document.querySelectorAll("[data-deadline]")) {
      const deadline = Number(e.dataset.deadline);
      const left = deadline - (now + skew);
      if (Number.isNaN(left) || deadline <= 0) {
        e.textContent = "no deadline";
        e.className = "deadline";
      } else if (left <= 0) {
        e.textContent = "expired";
        e.className = "deadline expired";
      } else {
        e.textContent = duration(left) + " left";
        e.className = "deadline" + (left < URGENT_MS ? " urgent" : "");
      }
    }
    for (const e of document.querySelectorAll("[data-since]")) {
      const age = now - Number(e.dataset.since);
      e.textContent = Number.isNaN(age) ? "" : duration(age);
    }
  }

  // ---- DOM helpers: text only ----

  // el creates an element with attributes (text: its textContent) and children (nodes, or
  // strings that become text nodes; null is skipped).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c);
    }
    return e;
  }

  function text(s) {
    return document.createTextNode(str(s));
  }

  function fact(label, value) {
    return [el("dt", { text: label }), el("dd", {}, value)];
  }

  function table(headers, rows) {
    return el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows));
  }

  function empty(message) {
    return el("p", { class: "empty", text: message });
  }

  function setCount(id, n) {
    $(id).textContent = String(n);
  }

  // ---- Formatting ----

  function str(v) {
    return v === undefined || v === null ? "" : String(v);
  }

  function arr(v) {
    return Array.isArray(v) ? v : [];
  }

  function pretty(v) {
    return v === undefined || v === null ? "(no arguments)" : JSON.stringify(v, null, 2);
  }

  function short(hash) {
    const h = str(hash).replace(/^sha256:/, "");
    return h.length > 12 ? h.slice(0, 12) + "…" : h;
  }

  function clock(ms) {
    if (Number.isNaN(ms)) return "—";
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  // stamp is a moment: its time of day when today, else its date too.
  function stamp(ms) {
    if (Number.isNaN(ms) || ms <= 0) return "—";
    const d = new Date(ms);
    if (d.toDateString() === new Date().toDateString()) return clock(ms);
    return d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" }) + " " + clock(ms);
  }

  function duration(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = s % 60;
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + String(m).padStart(2, "0") + "m";
    if (m > 0) return m + "m " + String(sec).padStart(2, "0") + "s";
    return sec + "s";
  }

  // ---- Start ----

  $("signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const k = $("key").value.trim();
    if (!k) {
      showSignIn("Paste the admin key first.");
      return;
    }
    signIn(k);
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("refresh").addEventListener("click", () => refresh());
  $("reload").addEventListener("click", (e) => reload(e.currentTarget));
  $("catalog-filter").addEventListener("input", drawCatalog);
  setInterval(tick, 1000);

  const stored = storedKey();
  if (stored) signIn(stored);
  else showSignIn("");
})();
