// The keypool status page: it asks the proxy's /status every two seconds
// and shows every route, key and recent event. It builds the page with DOM
// calls only (text is never parsed as HTML) and keeps no secret: the
// session is an HttpOnly cookie the script cannot read.
"use strict";

(() => {
  const pollEvery = 2000; // ms, while the page is visible
  const pollHidden = 15000; // ms, while it is not
  let report = null; // the last /status
  let hist = null; // the last /history: each key's hour, minute by minute
  let skew = 0; // the proxy's clock minus ours, ms
  let timer = 0;
  const buttons = new Map(); // unbench and enable buttons by action, route and key, kept across redraws
  // The operator's choices, by route, kept across redraws: "table" or
  // "cards", and the table's order.
  const views = new Map();
  const orders = new Map(); // {column, descending}
  // tableFrom is the number of keys from which a route shows as a table
  // unless the operator chose the cards.
  const tableFrom = 9;

  const $ = (id) => document.getElementById(id);

  // h builds an element: props set attributes ("class", "text" and "on…"
  // are special); children are elements or strings, added as text.
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c !== null && c !== undefined && c !== false) el.append(c);
    }
    return el;
  }

  // parseTime reads a time of /status; Go writes up to nine fractional
  // digits, Date.parse wants three.
  function parseTime(s) {
    return s ? Date.parse(s.replace(/(\.\d{3})\d+/, "$1")) : NaN;
  }
  const serverNow = () => Date.now() + skew;

  // span says a duration in words, to its two largest units, as keypool
  // status does: "42 s", "3 min 20 s", "4 h 12 min", "2 d 3 h".
  function span(ms) {
    let s = Math.max(0, Math.round(ms / 1000));
    const d = Math.floor(s / 86400);
    const hr = Math.floor(s / 3600) % 24;
    const m = Math.floor(s / 60) % 60;
    s %= 60;
    const nb = "\u00a0"; // "4 h" never breaks between the number and its unit
    if (d > 0) return `${d}${nb}d ${hr}${nb}h`;
    if (hr > 0) return `${hr}${nb}h ${m}${nb}min`;
    if (m >= 10) return `${m}${nb}min`;
    if (m > 0) return `${m}${nb}min ${s}${nb}s`;
    return `${s}${nb}s`;
  }
  const pad = (n) => String(n).padStart(2, "0");
  // clock says a time on this browser's clock: "18:47", or "Tue 09:00"
  // when it is not today.
  function clock(t, now, seconds) {
    const d = new Date(t);
    let hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    if (seconds) hm += `:${pad(d.getSeconds())}`;
    if (d.toDateString() === new Date(now).toDateString()) return hm;
    return `${d.toLocaleDateString("en", { weekday: "short" })} ${hm}`;
  }
  const backIn = (t, now) => `back in ${span(t - now)}, ${clock(t, now)}`;
  const ago = (t, now) => (now - t < 1500 ? "just now" : `${span(now - t)} ago`);

  // countdown is a text that says how long until (or since) a time, kept
  // current every second.
  function countdown(time, say) {
    const el = h("span", { class: "countdown" });
    el.dataset.time = String(time);
    el.dataset.say = say;
    el.textContent = sayTime(el, serverNow());
    return el;
  }
  function sayTime(el, now) {
    const t = Number(el.dataset.time);
    return el.dataset.say === "ago" ? ago(t, now) : backIn(t, now);
  }
  function tick() {
    const now = serverNow();
    for (const el of document.querySelectorAll(".countdown")) el.textContent = sayTime(el, now);
  }

  const percent = (used, limit) => Math.min(100, Math.round((100 * used) / limit));

  // usd says an amount of US dollars to the cent, or to four places below
  // a cent, as keypool status does: "$5.00", "$0.035", "$0.0004".
  function usd(v) {
    let s = v.toFixed(2);
    if (v !== 0 && Math.abs(v) < 1) {
      s = v.toFixed(4).replace(/0+$/, "");
      const places = s.length - s.indexOf(".") - 1;
      if (places < 2) s += "0".repeat(2 - places);
    }
    return `$${s}`;
  }

  // count writes a count with its thousands apart: 1,000,000.
  function count(n) {
    return Number(n).toLocaleString("en");
  }

  // bar shows one window's use against the limit the pool enforces,
  // saying so when that limit is the one learned from the vendor; without
  // a limit, the count alone. say writes an amount (a count by default).
  function bar(label, used, limit, learned, say = count, none = "no limit set") {
    if (!limit) {
      return h("div", { class: "use nolimit" }, h("span", { class: "use-label", text: label }),
        h("span", { class: "use-count", text: `${say(used)} · ${none}` }));
    }
    const pct = percent(used, limit);
    const fill = h("span", { class: "fill" });
    fill.style.width = `${pct}%`; // CSSOM, which the page's CSP allows
    let level = "";
    if (used >= limit) level = " at-limit";
    else if (pct >= 80) level = " near-limit";
    return h("div", { class: `use${level}` },
      h("span", { class: "use-label" }, label,
        learned ? h("span", { class: "learned", text: " · learned from the vendor" }) : null),
      h("span", { class: "use-count", text: `${say(used)} / ${say(limit)}` }),
      h("span", {
        class: "bar", role: "meter", "aria-label": label,
        "aria-valuemin": 0, "aria-valuemax": limit, "aria-valuenow": Math.min(used, limit),
      }, fill));
  }

  function modelUse(m) {
    const mn = m.minute;
    const dy = m.day;
    // A window without a limit is not counted unless some limit of the
    // key counts it: a 0 there would be a count never kept.
    const rows = [];
    if (mn.requests_limit || mn.requests) rows.push(bar("requests this minute", mn.requests, mn.requests_limit, mn.requests_limit_learned));
    if (mn.tokens_limit) rows.push(bar("tokens this minute", mn.tokens, mn.tokens_limit, mn.tokens_limit_learned));
    if (dy.requests_limit || dy.requests) rows.push(bar("requests today", dy.requests, dy.requests_limit, dy.requests_limit_learned));
    if (dy.tokens_limit) rows.push(bar("tokens today", dy.tokens, dy.tokens_limit, dy.tokens_limit_learned));
    // A request that names no model (a list of models, a file upload) is
    // counted under the empty name.
    const head = h("div", { class: "model-head" }, m.model
      ? h("span", { class: "model", text: m.model })
      : h("span", { class: "model no-model", text: "requests without a model" }));
    if (m.bench) {
      head.append(h("span", { class: "badge benched", text: `benched (${m.bench.kind})` }));
    }
    return h("div", { class: "model-use" }, head, rows, limitsList(m));
  }

  // capped reports whether a key is full because of its cap across
  // models (key_cap), and which of its windows: "day", "minute" or "".
  function capped(k) {
    if (k.state !== "full" || !k.cap) return "";
    const full = (w) => (w.requests_limit && w.requests >= w.requests_limit) || (w.tokens_limit && w.tokens >= w.tokens_limit);
    if (k.full === "day" && full(k.cap.day)) return "day";
    if (k.full === "minute" && full(k.cap.minute)) return "minute";
    return "";
  }

  // capUse shows a key's use of its cap, every model together, against
  // the cap's limits.
  function capUse(c) {
    const rows = [];
    if (c.minute.requests_limit) rows.push(bar("requests this minute", c.minute.requests, c.minute.requests_limit, false));
    if (c.minute.tokens_limit) rows.push(bar("tokens this minute", c.minute.tokens, c.minute.tokens_limit, false));
    if (c.day.requests_limit) rows.push(bar("requests today", c.day.requests, c.day.requests_limit, false));
    if (c.day.tokens_limit) rows.push(bar("tokens today", c.day.tokens, c.day.tokens_limit, false));
    return h("div", { class: "model-use cap-use" },
      h("div", { class: "model-head" }, h("span", { class: "model", text: "all models together (key_cap)" })), rows);
  }

  // spendBars show what a key or an account spent today and this month
  // against its budget, in US dollars.
  function spendBars(s) {
    return h("div", { class: "spend" },
      bar("spent today", s.today, s.per_day, false, usd, "no budget set"),
      bar("spent this month", s.month, s.per_month, false, usd, "no budget set"));
  }

  // accountsSpend shows the spend of each account of a route that has a
  // budget or has spent.
  function accountsSpend(r) {
    if (!r.accounts || r.accounts.length === 0) return null;
    return h("div", { class: "accounts" }, r.accounts.map((a) =>
      h("div", { class: "account-spend", "data-account": a.name },
        h("p", { class: "account" }, "account ", h("span", { class: "account-name", text: a.name }),
          " · what its keys spent together"),
        spendBars(a.spend))));
  }

  // limitsText says a set of limits in words: "30 req/min, 1,000 req/day".
  function limitsText(l) {
    const parts = [];
    if (l && l.rpm) parts.push(`${count(l.rpm)} req/min`);
    if (l && l.rpd) parts.push(`${count(l.rpd)} req/day`);
    if (l && l.tpm) parts.push(`${count(l.tpm)} tok/min`);
    if (l && l.tpd) parts.push(`${count(l.tpd)} tok/day`);
    return parts.join(", ");
  }

  // limitsList shows a model's limits: those configured, those learned
  // from the vendor's answers, and those enforced — axis by axis the
  // tighter.
  function limitsList(m) {
    const configured = limitsText(m.configured);
    const learned = limitsText(m.learned);
    if (!configured && !learned) return null;
    const row = (term, text) => [h("dt", { text: term }), h("dd", { text: text || "none" })];
    return h("dl", { class: "limits" },
      row("configured", configured),
      row("learned", learned),
      row("enforced", limitsText(m.enforced)));
  }

  function stateLine(k, route) {
    if (k.state === "disabled") {
      const d = k.disabled || {};
      const at = parseTime(d.at);
      return h("p", { class: "state-line", text: `disabled by ${d.by || "an operator"}${at > 0 ? ` · since ${clock(at, serverNow(), true)}` : ""}` });
    }
    if (k.state === "benched") {
      let why = `${k.bench.reason} (${k.bench.kind})`;
      if (k.bench_model) why += ` for ${k.bench_model}`;
      if (k.bench.level) why += `, quota level ${k.bench.level}`;
      return h("p", { class: "state-line" }, `${why} · `, countdown(parseTime(k.bench.until), "back"));
    }
    if (k.state === "full" && k.full === "vendor") {
      return h("p", { class: "state-line" }, "the vendor says its window is used up · ", countdown(parseTime(k.full_until), "back"));
    }
    if (capped(k) === "day") {
      return h("p", { class: "state-line", text: "capped: its daily cap across all models (key_cap) is used up" });
    }
    if (capped(k) === "minute") {
      return h("p", { class: "state-line", text: "capped: its cap a minute across all models (key_cap) is used up; it takes requests again as the minute slides" });
    }
    if (k.state === "full") {
      const why = {
        day: "its day's limit is used up",
        "budget-day": "its budget for today is spent: it takes requests again tomorrow",
        "budget-month": "its budget for this month is spent: it takes requests again next month",
      }[k.full] || "its minute's limit is used up: it takes requests again as the minute slides";
      return h("p", { class: "state-line", text: why });
    }
    if (route.benched_until) {
      return h("p", { class: "state-line", text: "serving, but its route is benched" });
    }
    if (!k.sent && k.models.length === 0) return h("p", { class: "state-line", text: "no requests yet" });
    return null;
  }

  // reading says what the vendor last said of a key's window: how much of
  // it is used, when it resets. A reading of nothing used says only when
  // the window resets, and a reset already past says so, in the past; a
  // reading that comes to neither is not shown.
  function reading(k, now) {
    const r = k.last;
    if (!r) return null;
    const window = r.window ? `its ${r.window} window` : "its window";
    const pct = r.utilization * 100;
    const parts = [];
    if (pct >= 1) parts.push(`${Math.round(pct)}% of ${window} used`);
    else if (pct > 0) parts.push(`under 1% of ${window} used`);
    const reset = parseTime(r.reset_at);
    if (reset > now) {
      parts.push(`${parts.length ? "it" : window} resets ${clock(reset, now)}`);
    } else if (reset && parts.length) {
      parts.push(`it has reset since, at ${clock(reset, now)}`);
    }
    if (parts.length === 0) return null;
    if (r.model) parts[0] += ` (${r.model})`;
    return h("p", { class: "reading" }, `Vendor said ${ago(parseTime(r.at), now)}: ${parts.join("; ")}`);
  }

  function counts(k) {
    const parts = [`sent ${k.sent}`];
    const a = k.answers || {};
    if (a.none) parts.push(`ok ${a.none}`);
    for (const kind of ["rate", "quota", "auth", "transient"]) {
      if (a[kind]) parts.push(`${kind} ${a[kind]}`);
    }
    if (k.conversations) parts.push(k.conversations === 1 ? "1 conversation stays here" : `${k.conversations} conversations stay here`);
    return h("p", { class: "counts", text: parts.join(" · ") });
  }

  // actions are the buttons a key may have: the endpoint each posts to,
  // its label and what it says while it waits.
  const actions = {
    unbench: { label: "Unbench", busy: "Unbenching…" },
    enable: { label: "Enable", busy: "Enabling…" },
  };

  function actionButton(action, route, key) {
    const id = `${action}\u0000${route}\u0000${key}`;
    let b = buttons.get(id);
    if (!b) {
      b = h("button", { type: "button", class: action, "data-route": route, "data-key": key, text: actions[action].label });
      b.addEventListener("click", () => act(action, route, key, b));
      buttons.set(id, b);
    }
    return b;
  }

  // keyButton is the button a key's state calls for: enable a disabled
  // key, unbench a benched one (or one whose route is benched); null for
  // none.
  function keyButton(route, k) {
    if (k.state === "disabled") return actionButton("enable", route.name, k.id);
    if (k.state === "benched" || route.benched_until) return actionButton("unbench", route.name, k.id);
    return null;
  }

  function keyCard(route, k, now) {
    const hour = keyChart(route.name, k);
    const badge = capped(k) ? "capped" : ({ serving: "serving", benched: "benched", full: "full", disabled: "disabled" }[k.state] || k.state);
    const card = h("article", { class: `key state-${k.state}`, "data-key": k.id, "data-route": route.name },
      h("div", { class: "key-head" },
        h("span", { class: "key-id", text: k.id }),
        h("span", { class: `tier ${k.paid ? "paid" : "free"}`, text: k.paid ? "paid" : "free" }),
        h("span", { class: `badge ${k.state}`, text: badge })),
      k.account ? h("p", { class: "account" }, "account ", h("span", { class: "account-name", text: k.account }),
        " · its windows are shared with the account's other keys") : null,
      stateLine(k, route),
      hour ? h("div", { class: "key-hour" }, h("span", { class: "use-label", text: "requests, the last hour" }), hour) : null,
      k.cap ? capUse(k.cap) : null,
      k.models.map(modelUse),
      k.spend ? spendBars(k.spend) : null,
      reading(k, now),
      counts(k));
    const button = keyButton(route, k);
    if (button) card.append(button);
    return card;
  }

  // The table of keys: one row a key, for a route of many. Each column
  // says how it sorts: by a number, or by text.
  const stateOrder = { disabled: 0, benched: 1, full: 2, serving: 3 };

  // windowUse is a key's use of one window ("minute" or "day") against its
  // limits, across its models: the fullest axis of any model decides, and
  // a model without a limit adds its count. It returns the words and the
  // fraction used (-1 with no limit).
  function windowUse(k, which) {
    let best = null;
    let requests = 0;
    for (const m of k.models.concat(k.cap ? [k.cap] : [])) {
      const w = m[which];
      requests += w.requests;
      for (const [used, limit, unit] of [[w.requests, w.requests_limit, "req"], [w.tokens, w.tokens_limit, "tok"]]) {
        if (!limit) continue;
        const frac = used / limit;
        if (!best || frac > best.frac) best = { frac, text: `${count(used)} / ${count(limit)} ${unit}` };
      }
    }
    return best || { frac: -1, text: `${count(requests)} req` };
  }

  // why says in a few words what keeps a key from serving.
  function why(k, route) {
    if (k.state === "disabled") return `disabled by ${(k.disabled && k.disabled.by) || "an operator"}`;
    if (capped(k)) return capped(k) === "day" ? "daily cap used up (key_cap)" : "cap a minute used up (key_cap)";
    if (k.state === "benched") return `${k.bench.reason} (${k.bench.kind})${k.bench_model ? ` for ${k.bench_model}` : ""}`;
    if (k.state === "full") {
      return {
        day: "day's limit used up", vendor: "vendor window used up", "budget-day": "budget spent today",
        "budget-month": "budget spent this month",
      }[k.full] || "minute's limit used up";
    }
    return route.benched_until ? "its route is benched" : "";
  }

  // backAt returns when a key serves again, in ms on the proxy's clock: 0
  // when it serves now, Infinity when it is not known to the minute.
  function backAt(k, route) {
    if (k.state === "disabled") return Infinity;
    if (k.state === "benched") return parseTime(k.bench.until);
    if (k.state === "full" && k.full === "vendor") return parseTime(k.full_until);
    if (k.state === "full") return Infinity;
    return route.benched_until ? parseTime(route.benched_until) : 0;
  }
  function backCell(k, route) {
    const t = backAt(k, route);
    if (t === 0) return "now";
    if (t !== Infinity) return countdown(t, "back");
    return {
      day: "as the day slides", "budget-day": "tomorrow", "budget-month": "next month",
    }[k.full] || "as the minute slides";
  }

  const columns = [
    { id: "key", label: "key", text: true, value: (k) => k.id,
      cell: (k) => [h("span", { class: "key-id", text: k.id }), " ", h("span", { class: `tier ${k.paid ? "paid" : "free"}`, text: k.paid ? "paid" : "free" })] },
    { id: "state", label: "state", value: (k) => stateOrder[k.state] ?? 4,
      cell: (k) => h("span", { class: `badge ${k.state}`, text: capped(k) ? "capped" : k.state }) },
    { id: "why", label: "why", text: true, value: (k, r) => why(k, r), cell: (k, r) => why(k, r) || "—" },
    { id: "back", label: "back", value: (k, r) => backAt(k, r), cell: (k, r) => backCell(k, r) },
    { id: "minute", label: "this minute", value: (k) => windowUse(k, "minute").frac, cell: (k) => windowUse(k, "minute").text, num: true },
    { id: "day", label: "today", value: (k) => windowUse(k, "day").frac, cell: (k) => windowUse(k, "day").text, num: true },
    { id: "spend", label: "spent today", value: (k) => (k.spend ? k.spend.today : -1),
      cell: (k) => (k.spend ? (k.spend.per_day ? `${usd(k.spend.today)} / ${usd(k.spend.per_day)}` : usd(k.spend.today)) : "—"), num: true },
    { id: "sent", label: "sent", value: (k) => k.sent, cell: (k) => String(k.sent), num: true },
    { id: "hour", label: "last hour", value: (k, r) => { const kh = keyHistory(r.name, k.id); return kh ? sumOf(kh.requests) : -1; },
      cell: (k, r) => keyChart(r.name, k) },
  ];

  // sortedKeys returns a route's keys in the order the operator chose,
  // the configuration's when none; ties keep it.
  function sortedKeys(r) {
    const o = orders.get(r.name);
    const keys = r.keys.slice();
    if (!o) return keys;
    const col = columns.find((c) => c.id === o.column);
    const sign = o.descending ? -1 : 1;
    return keys.map((k, i) => ({ k, i, v: col.value(k, r) }))
      .sort((a, b) => {
        let c = col.text ? String(a.v).localeCompare(String(b.v)) : (a.v === b.v ? 0 : a.v < b.v ? -1 : 1);
        return sign * c || a.i - b.i;
      })
      .map((x) => x.k);
  }

  // sortBy orders a route's table by a column, the other way when it is
  // already ordered by it.
  function sortBy(route, column) {
    const o = orders.get(route);
    orders.set(route, { column, descending: o && o.column === column ? !o.descending : false });
    render();
  }

  function keyTable(r, now) {
    const o = orders.get(r.name);
    const head = h("tr", {}, columns.map((c) => {
      const sorted = o && o.column === c.id;
      return h("th", { scope: "col", class: c.num ? "num" : null, "data-column": c.id,
        "aria-sort": sorted ? (o.descending ? "descending" : "ascending") : "none" },
      h("button", { type: "button", class: "sort", onclick: () => sortBy(r.name, c.id) },
        c.label, h("span", { class: "sort-mark", "aria-hidden": "true", text: sorted ? (o.descending ? " ▼" : " ▲") : "" })));
    }), h("th", { scope: "col" }, h("span", { class: "visually-hidden", text: "actions" })));
    const rows = sortedKeys(r).map((k) => h("tr", { class: `state-${k.state}`, "data-key": k.id },
      columns.map((c) => h("td", { class: c.num ? "num" : null, "data-column": c.id }, c.cell(k, r, now))),
      h("td", {}, keyButton(r, k))));
    return h("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": `keys of ${r.name}` },
      h("table", { class: "key-table" }, h("thead", {}, head), h("tbody", {}, rows)));
  }

  // viewOf returns how a route shows its keys: the operator's choice, else
  // a table from tableFrom keys, else cards.
  function viewOf(r) {
    return views.get(r.name) || (r.keys.length >= tableFrom ? "table" : "cards");
  }

  function viewToggle(r) {
    const current = viewOf(r);
    const option = (view, label) => h("button", {
      type: "button", class: `view-option${current === view ? " current" : ""}`, "data-view": view,
      "aria-pressed": current === view ? "true" : "false",
      onclick: () => { views.set(r.name, view); render(); },
    }, label);
    return h("div", { class: "view-toggle", role: "group", "aria-label": `how ${r.name} shows its keys` },
      option("table", "Table"), option("cards", "Cards"));
  }

  function routeSection(r, now) {
    const head = h("div", { class: "route-head" },
      h("h2", { text: r.name }),
      r.url ? h("span", { class: "url", text: r.url }) : null);
    if (r.benched_until) {
      head.append(h("span", { class: "badge benched", text: "benched" }), " ",
        countdown(parseTime(r.benched_until), "back"));
    } else {
      head.append(h("span", { class: "badge serving", text: "serving" }));
    }
    head.append(viewToggle(r));
    const keys = viewOf(r) === "table"
      ? keyTable(r, now)
      : h("div", { class: "keys" }, r.keys.map((k) => keyCard(r, k, now)));
    return h("section", { class: "route", "data-route": r.name, "data-view": viewOf(r), "aria-label": `route ${r.name}` },
      head, accountsSpend(r), routeCharts(r), keys);
  }

  // The last hour, drawn from /history: a series is 60 counts, one a
  // minute, oldest first; the last is the current minute.
  const svgNS = "http://www.w3.org/2000/svg";
  function svgEl(tag, attrs, ...children) {
    const el = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    for (const c of children) if (c) el.append(c);
    return el;
  }
  const svgTitle = (text) => {
    const t = document.createElementNS(svgNS, "title");
    t.textContent = text;
    return t;
  };

  // historyOf returns the hour of a route from the last /history, or null.
  function historyOf(route) {
    return (hist && hist.routes.find((r) => r.name === route)) || null;
  }
  function keyHistory(route, key) {
    const r = historyOf(route);
    return (r && r.keys.find((k) => k.id === key)) || null;
  }
  // total adds up series, minute by minute.
  function total(series) {
    const out = new Array(hist.minutes).fill(0);
    for (const one of series) one.forEach((v, i) => { out[i] += v; });
    return out;
  }
  const sumOf = (series) => series.reduce((a, b) => a + b, 0);
  // minuteAt says the clock time of minute i of the hour.
  const minuteAt = (i) => parseTime(hist.start) + i * 60000;

  // chart draws one series as bars, one a minute that has any, with a
  // line at each bench time. kind names the series, for its colour.
  function chart(kind, label, series, benchTimes, height) {
    const n = series.length;
    const top = Math.max(1, ...series);
    const svg = svgEl("svg", {
      class: `chart chart-${kind}`, viewBox: `0 0 ${n} ${height}`, preserveAspectRatio: "none",
      role: "img", "aria-label": `${label}, the last hour, a bar a minute`,
    });
    svg.append(svgEl("rect", { class: "chart-bg", x: 0, y: 0, width: n, height }));
    const now = serverNow();
    series.forEach((v, i) => {
      if (!v) return;
      const bh = Math.max(1, (v / top) * height);
      svg.append(svgEl("rect", { class: "chart-bar", x: i + 0.1, y: height - bh, width: 0.8, height: bh },
        svgTitle(`${clock(minuteAt(i), now)} · ${v} ${label}`)));
    });
    const start = parseTime(hist.start);
    for (const t of benchTimes) {
      const x = (parseTime(t) - start) / 60000;
      if (x < 0 || x > n) continue;
      svg.append(svgEl("line", { class: "bench-mark", x1: x, x2: x, y1: 0, y2: height, "vector-effect": "non-scaling-stroke" },
        svgTitle(`benched ${clock(parseTime(t), now, true)}`)));
    }
    return svg;
  }

  // routeCharts shows a route's hour: requests, the vendor's 429s, benches
  // and tokens of all its keys, each bench marked.
  function routeCharts(r) {
    const rh = historyOf(r.name);
    if (!rh) return null;
    const marks = rh.bench_times.concat(...rh.keys.map((k) => k.bench_times));
    if (marks.length === 0 && rh.keys.every((k) => sumOf(k.requests) === 0 && sumOf(k.benches) === 0)) {
      return h("div", { class: "last-hour quiet", "data-route": r.name },
        h("p", { class: "last-hour-head" }, h("strong", { text: "The last hour" }), " · no requests and no benches"));
    }
    const panels = [
      ["requests", "requests", total(rh.keys.map((k) => k.requests))],
      ["rate", "vendor 429s", total(rh.keys.map((k) => k.rate_limited))],
      ["bench", "benches", total(rh.keys.map((k) => k.benches))],
      ["tokens", "tokens", total(rh.keys.map((k) => k.tokens))],
    ].map(([kind, label, series]) => h("figure", { class: "panel", "data-series": kind },
      h("figcaption", {},
        h("span", {
          class: "panel-label", text: label,
          title: kind === "tokens" ? "counted where the route has a token limit or a price" : null,
        }),
        h("span", { class: "panel-total", text: count(sumOf(series)), title: "the hour's total" })),
      // The chart's scale, where a y-axis marks its top: the full height
      // is the busiest minute.
      h("div", { class: "chart-box" },
        chart(kind, label, series, marks, 40),
        sumOf(series) ? h("span", {
          class: "chart-peak", text: `${count(Math.max(...series))}/min`,
          title: "the busiest minute: the bars' full height",
        }) : null)));
    return h("div", { class: "last-hour", "data-route": r.name },
      h("p", { class: "last-hour-head" }, h("strong", { text: "The last hour" }), " · a bar a minute, the busiest minute's count at its top left, the hour's total beside; a line marks each bench"),
      h("div", { class: "panels" }, panels),
      h("div", { class: "axis" }, h("span", { text: "60 min ago" }), h("span", { text: "now" })));
  }

  // keyChart is a key's hour in small: its requests, its 429s over them,
  // its benches marked.
  function keyChart(route, k) {
    const kh = keyHistory(route, k.id);
    if (!kh || (sumOf(kh.requests) === 0 && kh.bench_times.length === 0)) return null;
    const svg = chart("requests", "requests", kh.requests, kh.bench_times, 24);
    svg.classList.add("key-chart");
    kh.rate_limited.forEach((v, i) => {
      if (!v) return;
      svg.append(svgEl("rect", { class: "chart-429", x: i + 0.1, y: 0, width: 0.8, height: 3 },
        svgTitle(`${clock(minuteAt(i), serverNow())} · ${v} vendor 429s`)));
    });
    return svg;
  }

  function eventItem(e, now) {
    const t = parseTime(e.at);
    return h("li", { class: `event ${e.kind}` },
      h("time", { datetime: e.at, text: clock(t, now, true) }),
      h("span", { class: `badge ${e.kind}`, text: e.kind }),
      h("span", { class: "event-text", text: e.text }),
      e.count > 1 ? h("span", { class: "count", text: `×${e.count}` }) : null);
  }

  // clientLimits says a client's own windows: "5 rpm · 1000 tpd".
  function clientLimits(l) {
    if (!l) return "—";
    const parts = [["RPM", "rpm"], ["RPD", "rpd"], ["TPM", "tpm"], ["TPD", "tpd"]]
      .filter(([k]) => l[k]).map(([k, unit]) => `${l[k]} ${unit}`);
    return parts.length ? parts.join(" · ") : "—";
  }

  // useText says what a client used in a period: "12 req · 3400 tok · $0.04".
  const useText = (u) => `${u.requests} req · ${u.tokens} tok · ${usd(u.spend_usd)}`;

  // budgetCell shows a client's spend against its budget for one period,
  // as a bar, or a dash without one.
  function budgetCell(spent, budget) {
    if (!budget) return "—";
    spent = spent || 0;
    const pct = percent(spent, budget);
    const fill = h("span", { class: "fill" });
    fill.style.width = `${pct}%`; // CSSOM, which the page's CSP allows
    const level = spent >= budget ? " at-limit" : pct >= 80 ? " near-limit" : "";
    return h("span", { class: `client-budget${level}` },
      h("span", { class: "use-count", text: `${usd(spent)} / ${usd(budget)}` }),
      h("span", { class: "bar", role: "meter", "aria-label": "spent of the budget",
        "aria-valuemin": 0, "aria-valuemax": budget, "aria-valuenow": Math.min(spent, budget) }, fill));
  }

  // expiry says when a client's token expires, as a date and time in UTC
  // (it may be months off), or that it has.
  function expiry(at, now) {
    const t = parseTime(at);
    const text = new Date(t).toISOString().slice(0, 16).replace("T", " ") + " UTC";
    return h("time", { datetime: at, class: t <= now ? "expired" : null, text: t <= now ? `expired ${text}` : text });
  }

  // clientsSection shows the proxy's clients — the tokens of clients: in
  // its configuration — with their limits, budgets and what each used,
  // today and this month, by tag beneath.
  function clientsSection(clients, now) {
    // One proxy token without rules is one user: no table to read.
    const ruled = (c) => c.limits || c.budget || c.models || c.routes || c.expires;
    if (!clients || clients.length === 0 || (clients.length === 1 && !ruled(clients[0]))) return null;
    const head = h("tr", {}, ["client", "limits", "spent today", "spent this month", "today", "this month", "expires"]
      .map((label) => h("th", { scope: "col", text: label })));
    const rows = [];
    for (const c of clients) {
      const b = c.budget || {};
      const spent = c.spent || {};
      rows.push(h("tr", { "data-client": c.name },
        h("td", {}, h("strong", { text: c.name }),
          c.models ? h("div", { class: "client-scope", text: `models: ${c.models.join(", ")}` }) : null,
          c.routes ? h("div", { class: "client-scope", text: `routes: ${c.routes.join(", ")}` }) : null),
        h("td", { text: clientLimits(c.limits) }),
        h("td", {}, budgetCell(spent.PerDay, b.PerDay)),
        h("td", {}, budgetCell(spent.PerMonth, b.PerMonth)),
        h("td", { class: "num", text: useText(c.today) }),
        h("td", { class: "num", text: useText(c.month) }),
        h("td", {}, c.expires ? expiry(c.expires, now) : "—")));
      for (const t of c.tags || []) {
        rows.push(h("tr", { class: "client-tag", "data-client": c.name, "data-tag": t.tag },
          h("td", { text: `tag ${t.tag}` }), h("td", {}), h("td", {}), h("td", {}),
          h("td", { class: "num", text: useText(t.today) }),
          h("td", { class: "num", text: useText(t.month) }), h("td", {})));
      }
    }
    return h("section", { class: "clients", id: "clients" },
      h("h2", { text: "Clients" }),
      h("p", { class: "counts", text: "What each client token used, counted by this process; spend against a budget is every replica's." }),
      h("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": "clients" },
        h("table", { class: "key-table client-table" }, h("thead", {}, head), h("tbody", {}, rows))));
  }

  function render() {
    const now = serverNow();
    let keys = 0;
    const states = { serving: 0, benched: 0, full: 0, disabled: 0 };
    for (const r of report.routes) {
      for (const k of r.keys) {
        keys++;
        states[k.state] = (states[k.state] || 0) + 1;
      }
    }
    const routes = report.routes.length;
    $("summary").replaceChildren(
      `${routes} ${routes === 1 ? "route" : "routes"} · ${keys} ${keys === 1 ? "key" : "keys"}: ${states.serving} serving, ${states.benched} benched, ${states.full} full${states.disabled ? `, ${states.disabled} disabled` : ""} · updated `,
      countdown(Date.now() + skew, "ago"));
    storeBanner(report.store);
    reloadBanner(report.reload);
    $("routes").replaceChildren(...report.routes.map((r) => routeSection(r, now)));
    const clients = clientsSection(report.clients, now);
    $("clients").replaceChildren(...(clients ? [clients] : []));
    const events = report.events || [];
    $("events-section").hidden = events.length === 0;
    $("events").replaceChildren(...events.map((e) => eventItem(e, now)));
  }

  // storeBanner says, while the state store fails, why, and since when.
  function storeBanner(store) {
    const el = $("store-banner");
    if (!store || store.healthy) {
      el.hidden = true;
      el.replaceChildren();
      return;
    }
    const since = store.since
      ? [" since ", h("time", { datetime: store.since, text: clock(parseTime(store.since), serverNow(), true) })]
      : [];
    el.replaceChildren(
      h("strong", { text: "The state store is failing" }),
      ...since,
      `: ${store.reason}. `,
      "The proxy serves on, but its windows and benches may not be saved, or shared with other replicas, until the store works again.");
    el.hidden = false;
  }

  // reloadBanner says, when the last reload of the configuration was
  // refused, when, and each of the file's mistakes.
  function reloadBanner(reload) {
    const el = $("reload-banner");
    if (!reload || reload.ok) {
      el.hidden = true;
      el.replaceChildren();
      return;
    }
    const mistakes = reload.mistakes || [];
    el.replaceChildren(
      h("strong", { text: "The configuration was not reloaded" }),
      " at ", h("time", { datetime: reload.at, text: clock(parseTime(reload.at), serverNow(), true) }),
      reload.by ? ` (${reload.by})` : "",
      `: nothing changed, and the proxy serves on as before. ${mistakes.length === 1 ? "Its mistake" : "Its mistakes"}:`,
      h("ul", {}, mistakes.map((m) => h("li", { text: m }))));
    el.hidden = false;
  }

  function problem(text) {
    $("problem").textContent = text || "";
    $("problem").hidden = !text;
  }

  function showLogin() {
    $("login").hidden = false;
    $("logout").hidden = true;
    $("routes").replaceChildren();
    $("clients").replaceChildren();
    $("store-banner").hidden = true;
    $("reload-banner").hidden = true;
    $("events-section").hidden = true;
    $("summary").textContent = "Log in to see the proxy's routes and keys.";
    if (location.hash === "#login-failed" || location.hash === "#login-wait") {
      $(location.hash.slice(1)).hidden = false;
      history.replaceState(null, "", location.pathname);
    }
    $("token").focus();
  }

  async function poll() {
    clearTimeout(timer);
    try {
      const res = await fetch("status", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
      if (res.status === 401) {
        showLogin();
        return; // until the login reloads the page
      }
      if (!res.ok) throw new Error(`/status answered ${res.status}`);
      const data = await res.json();
      hist = await history();
      skew = parseTime(data.now) - Date.now();
      report = data;
      $("login").hidden = true;
      $("logout").hidden = false;
      problem("");
      render();
    } catch (err) {
      problem(`Lost touch with the proxy (${err.message}); trying again.`);
    }
    timer = setTimeout(poll, document.hidden ? pollHidden : pollEvery);
  }

  // history asks /history; null from a proxy without it, or when it
  // fails: the page shows what /status says without the charts.
  async function history() {
    try {
      const res = await fetch("history", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
      return res.ok ? await res.json() : null;
    } catch {
      return null;
    }
  }

  async function act(action, route, key, button) {
    button.disabled = true;
    button.textContent = actions[action].busy;
    try {
      const res = await fetch(`keys/${encodeURIComponent(route)}/${encodeURIComponent(key)}/${action}`,
        { method: "POST", credentials: "same-origin" });
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        throw new Error((body.error && body.error.message) || `the proxy answered ${res.status}`);
      }
      buttons.delete(`${action}\u0000${route}\u0000${key}`);
    } catch (err) {
      problem(`Could not ${action} ${key}: ${err.message}`);
    } finally {
      button.disabled = false;
      button.textContent = actions[action].label;
    }
    await poll();
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) poll();
  });
  setInterval(tick, 1000);
  poll();
})();
