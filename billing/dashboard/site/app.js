// Bulkhead usage dashboard. The token lives only in this closure: read from
// the form or the URL fragment (#token=..., which browsers never send), then
// the fragment is dropped from the address bar. Nothing is written to
// storage, cookies or URLs. All times are shown in the viewer's time zone.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const ranges = {
    "24h": { hours: 24, granularity: "hour", label: "· last 24 h" },
    "7d": { hours: 24 * 7, granularity: "hour", label: "· last 7 days" },
    "30d": { hours: 24 * 30, granularity: "day", label: "· last 30 days" },
  };
  const outcomes = ["stop", "length", "cancelled", "timeout", "refused", "error"];
  const outcomeNames = { stop: "Completed", length: "Max tokens", cancelled: "Cancelled", timeout: "Timed out", refused: "Refused", error: "Error" };
  const outcomeColors = { stop: "#16a34a", length: "#65a30d", cancelled: "#94a3b8", timeout: "#d97706", refused: "#f59e0b", error: "#dc2626" };
  const palette = ["#f38020", "#2563eb", "#16a34a", "#9333ea", "#db2777", "#0891b2", "#ca8a04", "#4b5563"];
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const timeFmt = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const clockFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const dateFmt = new Intl.DateTimeFormat(undefined, { weekday: "short", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  const intFmt = new Intl.NumberFormat();

  let token = "";
  // noKey is the key filter's value for requests made without an API key
  // (not a valid key name, so it names no key).
  const noKey = "(none)";
  let state = { range: "24h", model: "", cursor: "", from: "", to: "", key: "", tag: "", requests: [] };
  let chart = null;
  let loadSeq = 0;

  function fmtNeurons(n) {
    const d = n === 0 ? 0 : n < 1 ? 4 : n < 100 ? 3 : 1;
    return n.toLocaleString(undefined, { minimumFractionDigits: 0, maximumFractionDigits: d });
  }
  function setNum(id, v, text) {
    const el = $(id);
    el.dataset.value = String(v);
    el.textContent = text;
  }

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, accept) {
    const res = await fetch(path, {
      headers: { Authorization: "Bearer " + token, Accept: accept || "application/json" },
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
    });
    if (accept === "text/csv" && res.ok) return res.blob();
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok || !body || !body.success) {
      const msg = body && body.errors && body.errors[0] ? body.errors[0].message : res.statusText || "request failed";
      throw new APIError(res.status, msg);
    }
    return body.result;
  }

  function show(view) {
    $("signin").hidden = view !== "signin";
    $("dash").hidden = view !== "dash";
    $("who").hidden = view !== "dash";
  }

  function showError(err) {
    const el = $("error");
    let text = err.message;
    if (err.status === 401) text = "This token was refused (expired, malformed or not signed by this platform). Paste another one.";
    else if (err.status === 403) text = "This token cannot read usage here: it needs the billing:read scope, for its own account. (" + err.message + ")";
    else if (err.status === 429) text = "Too many requests; try again in a moment. (" + err.message + ")";
    else if (!err.status) text = "Could not reach the server: " + err.message;
    el.textContent = text;
    el.hidden = false;
  }

  function query() {
    const r = ranges[state.range];
    const to = new Date();
    const from = new Date(to.getTime() - r.hours * 3600e3);
    state.from = from.toISOString().replace(/\.\d+Z$/, "Z");
    state.to = to.toISOString().replace(/\.\d+Z$/, "Z");
    const p = new URLSearchParams({ from: state.from, to: state.to, granularity: r.granularity });
    if (state.model) p.set("model", state.model);
    return p;
  }

  async function load() {
    const seq = ++loadSeq;
    $("error").hidden = true;
    $("loading").hidden = false;
    $("dash").setAttribute("aria-busy", "true");
    $("dash").dataset.state = "loading";
    try {
      const p = query();
      const byKey = new URLSearchParams({ from: state.from, to: state.to, granularity: ranges[state.range].granularity, group_by: "key" });
      // Key policies are extra: when they cannot be read (a token without
      // the scope, an older edge without the call), the spend by key still shows.
      const [usage, recent, keys, policies] = await Promise.all([
        api("/ai/usage?" + p.toString()),
        api("/ai/usage/requests?limit=20"),
        api("/ai/usage?" + byKey.toString()),
        api("/ai/usage/keys").catch((err) => ({ failed: err })),
      ]);
      if (seq !== loadSeq) return;
      show("dash");
      render(usage);
      state.cursor = recent.cursor || "";
      state.requests = recent.requests;
      renderKeys(keys.groups || [], policies);
      renderKeyFilter();
      renderTagFilter();
      applyKeyFilter();
      const dash = $("dash");
      dash.dataset.from = state.from;
      dash.dataset.to = state.to;
      dash.dataset.granularity = ranges[state.range].granularity;
      dash.dataset.state = "ready";
    } catch (err) {
      if (seq !== loadSeq) return;
      $("dash").dataset.state = "error";
      if (err.status === 401 || err.status === 403) {
        token = "";
        show("signin");
        $("signin").prepend($("error"));
      }
      showError(err);
    } finally {
      if (seq === loadSeq) {
        $("loading").hidden = true;
        $("dash").removeAttribute("aria-busy");
      }
    }
  }

  function render(u) {
    $("account").textContent = u.account_id;
    document.querySelectorAll(".range-label").forEach((el) => { el.textContent = ranges[state.range].label; });
    const t = u.today;
    $("today-date").textContent = "· " + t.date + " UTC";
    setNum("neurons-today", t.neurons, fmtNeurons(t.neurons));
    const resets = new Date(t.resets_at);
    $("resets").textContent = "Resets " + dateFmt.format(resets) + " (00:00 UTC)";
    const fill = $("budget-fill");
    if (t.daily_budget != null) {
      const used = t.daily_budget > 0 ? Math.min(1, t.neurons / t.daily_budget) : 1;
      fill.style.width = (used * 100).toFixed(1) + "%";
      fill.className = "fill" + (used >= 1 ? " bad" : used >= 0.8 ? " warn" : "");
      $("budget-line").textContent = fmtNeurons(t.daily_budget) + " neuron daily budget · " + (used * 100).toFixed(used < 0.1 ? 2 : 1) + "% used";
      setNum("neurons-remaining", t.remaining, fmtNeurons(t.remaining));
    } else {
      fill.style.width = "0";
      $("budget-line").textContent = "No daily budget on this account";
      setNum("neurons-remaining", "unlimited", "Unlimited");
    }
    const tot = u.totals;
    setNum("requests-total", tot.requests, intFmt.format(tot.requests));
    setNum("neurons-total", tot.neurons, fmtNeurons(tot.neurons));
    setNum("tokens-total", tot.prompt_tokens + tot.completion_tokens, intFmt.format(tot.prompt_tokens + tot.completion_tokens));
    setNum("prompt-tokens", tot.prompt_tokens, intFmt.format(tot.prompt_tokens));
    setNum("cached-tokens", tot.cached_tokens, intFmt.format(tot.cached_tokens));
    setNum("completion-tokens", tot.completion_tokens, intFmt.format(tot.completion_tokens));

    const sel = $("model");
    const known = new Set(Array.from(sel.options).map((o) => o.value));
    for (const m of u.models) {
      if (!known.has(m)) sel.append(new Option(m, m));
    }
    sel.value = state.model;

    const ol = $("outcomes");
    ol.replaceChildren();
    const maxN = Math.max(1, ...outcomes.map((o) => tot.outcomes[o] || 0));
    for (const o of outcomes) {
      const n = tot.outcomes[o] || 0;
      const li = document.createElement("li");
      li.dataset.outcome = o;
      li.dataset.value = String(n);
      const name = document.createElement("span");
      name.textContent = outcomeNames[o];
      const bar = document.createElement("div");
      bar.className = "bar";
      const fillEl = document.createElement("span");
      fillEl.style.width = ((n / maxN) * 100).toFixed(1) + "%";
      fillEl.style.background = outcomeColors[o];
      bar.append(fillEl);
      const num = document.createElement("span");
      num.className = "n";
      num.textContent = intFmt.format(n);
      li.append(name, bar, num);
      ol.append(li);
    }

    for (const k of ["ttft", "total"]) {
      const p = u.latency_ms[k];
      for (const q of ["p50", "p90", "p99"]) {
        const el = $(k + "-" + q);
        el.dataset.value = p ? String(p[q]) : "";
        el.textContent = p ? "≤ " + intFmt.format(p[q]) : "–";
      }
    }
    renderChart(u);
    $("zone").textContent = "Times are shown in " + zone + ". Daily budgets reset at 00:00 UTC, monthly ones on the 1st.";
  }

  function renderChart(u) {
    const gran = u.granularity === "day" ? 86400 : 3600;
    const from = Math.floor(Date.parse(u.from) / 1000 / gran) * gran;
    const to = Date.parse(u.to) / 1000;
    const xs = [];
    for (let x = from; x < to; x += gran) xs.push(x);
    const models = u.models;
    const index = new Map(xs.map((x, i) => [x, i]));
    const ys = models.map(() => xs.map(() => 0));
    for (const p of u.series) {
      const i = index.get(Date.parse(p.start) / 1000);
      const m = models.indexOf(p.model);
      if (i !== undefined && m >= 0) ys[m][i] += p.neurons;
    }
    const empty = u.totals.requests === 0;
    $("chart-empty").hidden = !empty;
    $("chart").hidden = empty;
    $("chart-sub").textContent = models.length ? "per model, per " + u.granularity : "";
    if (chart) { chart.destroy(); chart = null; }
    if (empty || typeof uPlot === "undefined") return;
    const el = $("chart");
    const width = Math.max(280, el.clientWidth);
    const small = width < 500;
    // Stacked bars: model k is drawn from the sum of models 0..k-1 to the
    // sum of 0..k; the tallest stack goes first, so each model's colour
    // shows as its own band. The legend and tooltips show each model's own
    // value, not the running sum.
    const cum = [];
    ys.forEach((y, k) => { cum.push(y.map((v, i) => v + (k ? cum[k - 1][i] : 0))); });
    const order = models.map((_, k) => models.length - 1 - k);
    const bars = uPlot.paths.bars({ size: [0.72, 48], gap: 2 });
    chart = new uPlot({
      width, height: small ? 220 : 280,
      tzDate: (ts) => new Date(ts * 1000),
      legend: { show: true, live: !small },
      cursor: { points: { show: false } },
      scales: { x: { time: true }, y: { range: (_, min, max) => [0, max > 0 ? max * 1.15 : 1] } },
      axes: [
        { stroke: "#6b7385", grid: { stroke: "#eef0f4" }, ticks: { stroke: "#e3e6ec" } },
        { stroke: "#6b7385", grid: { stroke: "#eef0f4" }, ticks: { stroke: "#e3e6ec" }, size: small ? 48 : 60,
          values: (_, vals) => vals.map((v) => fmtNeurons(v)) },
      ],
      series: [
        { label: "Time", value: (_, v) => (v == null ? "–" : timeFmt.format(new Date(v * 1000))) },
        ...order.map((k) => ({
          label: models[k], stroke: palette[k % palette.length], width: 0,
          fill: palette[k % palette.length], paths: bars, points: { show: false },
          value: (u, _v, _s, i) => (i == null ? "–" : fmtNeurons(ys[k][i]) + " neurons"),
        })),
      ],
    }, [xs, ...order.map((k) => cum[k])], el);
  }

  function pct(share) {
    const p = share * 100;
    return p.toLocaleString(undefined, { maximumFractionDigits: p >= 10 ? 0 : p >= 1 ? 1 : 2 }) + "%";
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function bar(frac, cls) {
    const b = el("div", "bar" + (cls ? " " + cls : ""));
    const fill = el("span");
    fill.style.width = (Math.min(1, Math.max(0, frac)) * 100).toFixed(1) + "%";
    b.append(fill);
    return b;
  }
  const periodNames = { day: "daily", month: "monthly" };

  // budgetCell shows one budget of a key's policy: the period's spend
  // against it ("2.26 / 2.17 (104%)") over a bar, or the spend alone when
  // the policy sets no budget for the period.
  function budgetCell(b, cls) {
    const td = el("td", "budget" + (cls ? " " + cls : ""));
    td.dataset.value = String(b.neurons);
    if (b.budget == null) {
      td.append(el("span", "", fmtNeurons(b.neurons)), el("span", "muted", " · no budget"));
      return td;
    }
    td.dataset.budget = String(b.budget);
    td.dataset.share = String(b.share);
    td.append(el("span", "", fmtNeurons(b.neurons) + " / " + fmtNeurons(b.budget) + " (" + pct(b.share) + ")"),
      bar(b.share, b.share >= 1 ? "bad" : b.share >= 0.8 ? "warn" : ""));
    td.title = periodNames[b.period] + " budget, " + b.start + " UTC";
    return td;
  }

  // renderKeys lists the range's spend by API key (the token's key claim;
  // requests without one as "no key"), most neurons first, as the API
  // orders them, joined with the keys' policies (GET /ai/usage/keys):
  // today's and this month's spend against their budgets, hard or soft,
  // and the highest alert raised. Keys with a policy but no spend in the
  // range come last. pol is that call's answer, or {failed: error}.
  function renderKeys(groups, pol) {
    const policies = new Map();
    if (!pol.failed) for (const k of pol.keys || []) policies.set(k.key, k);
    const rows = groups.map((g) => ({ name: g.name, requests: g.requests, neurons: g.neurons }));
    const named = new Set(rows.map((r) => r.name));
    for (const k of policies.keys()) if (!named.has(k)) rows.push({ name: k, requests: 0, neurons: 0 });
    const total = rows.reduce((a, r) => a + r.neurons, 0);
    const tb = $("keys");
    tb.replaceChildren();
    for (const r of rows) {
      const tr = document.createElement("tr");
      tr.dataset.key = r.name;
      tr.dataset.value = String(r.neurons);
      tr.dataset.requests = String(r.requests);
      tr.append(
        el("td", r.name ? "key" : "key none", r.name || "no key"),
        el("td", "num hide-s", intFmt.format(r.requests)),
        el("td", "num", fmtNeurons(r.neurons)));
      const share = el("td", "share hide-s");
      share.append(bar(total > 0 ? r.neurons / total : 0));
      tr.append(share);
      const k = policies.get(r.name);
      if (!k) {
        tr.dataset.alert = "";
        tr.append(el("td", "budget none", pol.failed ? "–" : "no budget"), el("td", "budget hide-s", "–"),
          el("td", "hide-s", "–"), el("td", "alert", "–"));
        tb.append(tr);
        continue;
      }
      const p = k.policy;
      tr.append(budgetCell(k.day), budgetCell(k.month, "hide-s"));
      const kind = el("td", "kind hide-s");
      const budgeted = p.daily_neurons > 0 || p.monthly_neurons > 0;
      kind.append(el("span", "", budgeted ? (p.soft ? "Soft" : "Hard") : "–"));
      kind.title = budgeted ? (p.soft ? "Soft: alerts only" : "Hard: the key's requests are refused (3036) once a budget is spent") : "";
      const limits = [];
      if (p.requests_per_minute) limits.push(intFmt.format(p.requests_per_minute) + "/min");
      if (p.max_concurrent) limits.push(intFmt.format(p.max_concurrent) + " at once");
      if (limits.length) kind.append(el("span", "limits muted", limits.join(" · ")));
      tr.append(kind);
      const alert = el("td", "alert");
      const level = Math.max(k.day.alert, k.month.alert);
      tr.dataset.alert = level ? String(level) : budgeted ? "ok" : "";
      if (level) {
        const b = el("span", "badge " + (level >= 100 ? "al-bad" : "al-warn"), level + "% alert");
        b.title = [k.day, k.month].filter((x) => x.alert).map((x) => periodNames[x.period] + " budget: " + x.alert + "% reached").join("; ");
        alert.append(b);
      } else if (budgeted) {
        alert.append(el("span", "badge al-ok", "ok"));
      } else {
        alert.textContent = "–";
      }
      tr.append(alert);
      tb.append(tr);
    }
    $("keys-empty").hidden = rows.length > 0;
    document.querySelector(".keys").hidden = rows.length === 0;
    const note = $("keys-note");
    note.hidden = !pol.failed;
    if (pol.failed) {
      const e = pol.failed;
      note.textContent = "Budgets and alerts per key are not shown: " +
        (e.status === 403 ? "this token cannot read them (" + e.message + ")" : e.message || "the request failed") + ".";
    }
    renderAlerts(pol.failed ? [] : pol.alerts || []);
  }

  // renderAlerts lists the most recent budget alerts, newest first.
  function renderAlerts(alerts) {
    const ul = $("alerts");
    ul.replaceChildren();
    for (const a of alerts.slice(0, 8)) {
      const li = el("li");
      li.dataset.key = a.key;
      li.dataset.threshold = String(a.threshold);
      li.append(el("span", "badge " + (a.threshold >= 100 ? "al-bad" : "al-warn"), a.threshold + "%"),
        el("span", "key", a.key),
        el("span", "", periodNames[a.period] + " budget " + a.start + ": " + fmtNeurons(a.neurons) + " of " +
          fmtNeurons(a.budget) + " neurons" + (a.soft ? " (soft)" : a.threshold >= 100 ? " (hard: refused until it resets)" : " (hard)")));
      li.title = "Raised by request " + a.request_id;
      ul.append(li);
    }
    $("alerts-box").hidden = alerts.length === 0;
  }

  // renderKeyFilter offers each key of the keys table and of the loaded
  // requests, keeping the current choice.
  function renderKeyFilter() {
    const sel = $("key-filter");
    const all = new Set(Array.from(document.querySelectorAll("#keys tr")).map((tr) => tr.dataset.key || noKey));
    for (const r of state.requests) all.add(r.key || noKey);
    if (state.key) all.add(state.key);
    const opts = [new Option("All keys", "")];
    for (const v of [...all].sort((a, b) => (a === noKey) - (b === noKey) || a.localeCompare(b))) {
      opts.push(new Option(v === noKey ? "no key" : v, v));
    }
    sel.replaceChildren(...opts);
    sel.value = state.key;
  }

  // tagsOf are a request's metadata pairs as "name=value" tags.
  function tagsOf(r) {
    return Object.entries(r.metadata || {}).map(([k, v]) => k + "=" + v);
  }

  // renderTagFilter offers each metadata tag of the loaded requests,
  // keeping the current choice.
  function renderTagFilter() {
    const sel = $("tag-filter");
    const all = new Set(state.requests.flatMap(tagsOf));
    if (state.tag) all.add(state.tag);
    const opts = [new Option("All tags", "")];
    for (const v of [...all].sort()) opts.push(new Option(v, v));
    sel.replaceChildren(...opts);
    sel.value = state.tag;
  }

  // applyKeyFilter shows only the chosen key's requests and marks its row
  // in the keys table.
  function applyKeyFilter() {
    const want = state.key === noKey ? "" : state.key;
    document.querySelectorAll("#keys tr").forEach((tr) => {
      const on = state.key !== "" && tr.dataset.key === want;
      tr.classList.toggle("on", on);
      if (on) tr.setAttribute("aria-current", "true");
      else tr.removeAttribute("aria-current");
    });
    $("dash").dataset.key = state.key;
    renderRecent();
  }

  // renderRecent draws the loaded recent requests, only the chosen key's
  // when the key filter is set (the filter works on what is loaded: Load
  // more looks further back).
  function renderRecent() {
    const tb = $("recent");
    tb.replaceChildren();
    const want = state.key === noKey ? "" : state.key;
    const filtered = state.key !== "" || state.tag !== "";
    const reqs = state.requests.filter((r) => (!state.key || (r.key || "") === want) && (!state.tag || tagsOf(r).includes(state.tag)));
    for (const r of reqs) {
      const tr = document.createElement("tr");
      tr.dataset.requestId = r.id;
      tr.dataset.key = r.key || "";
      tr.dataset.tags = tagsOf(r).join(" ");
      const cell = (text, cls) => {
        const td = el("td", cls, text);
        tr.append(td);
        return td;
      };
      const when = new Date(r.time);
      const time = cell(when.toDateString() === new Date().toDateString() ? clockFmt.format(when) : timeFmt.format(when));
      time.title = when.toString();
      cell(r.model, "model");
      cell(r.key || "–", "key hide-s");
      const o = el("td", "outcome");
      o.append(el("span", "badge o-" + r.outcome, outcomeNames[r.outcome] || r.outcome));
      tr.append(o);
      const inTd = cell(intFmt.format(r.prompt_tokens), "num hide-s");
      if (r.cached_tokens) inTd.title = r.cached_tokens + " cached";
      cell(intFmt.format(r.completion_tokens), "num out");
      cell(fmtNeurons(r.neurons), "num neurons").dataset.value = String(r.neurons);
      cell(r.ttft_ms ? intFmt.format(r.ttft_ms) + " ms" : "–", "num hide-s");
      cell(intFmt.format(r.total_ms) + " ms", "num hide-s");
      cell(r.id.length > 14 ? r.id.slice(0, 12) + "…" : r.id, "id hide-s").title = r.id;
      tb.append(tr);
    }
    const n = reqs.length;
    $("recent-empty").hidden = n > 0;
    $("recent-empty-text").textContent = filtered && state.requests.length
      ? "None of the " + state.requests.length + " loaded requests match the filter." + (state.cursor ? " Load more to look further back." : "")
      : "No requests yet.";
    document.querySelector(".recent").hidden = n === 0;
    $("recent-count").textContent = filtered ? n + " of " + state.requests.length + " loaded" : n ? n + " shown, newest first" : "";
    $("more").hidden = !state.cursor;
  }

  async function more() {
    try {
      const r = await api("/ai/usage/requests?limit=20&cursor=" + encodeURIComponent(state.cursor));
      state.cursor = r.cursor || "";
      state.requests = state.requests.concat(r.requests);
      renderKeyFilter();
      renderTagFilter();
      renderRecent();
    } catch (err) {
      showError(err);
    }
  }

  async function csv() {
    try {
      const blob = await api("/ai/usage?" + query().toString(), "text/csv");
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = "usage-" + state.range + ".csv";
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    } catch (err) {
      showError(err);
    }
  }

  function start(t) {
    token = t.trim();
    if (!token) return;
    $("token").value = "";
    $("dash").prepend($("error"));
    load();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const frag = new URLSearchParams(location.hash.slice(1));
    const t = frag.get("token");
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    $("token-form").addEventListener("submit", (e) => { e.preventDefault(); start($("token").value); });
    $("signout").addEventListener("click", () => { token = ""; show("signin"); $("error").hidden = true; });
    $("refresh").addEventListener("click", load);
    $("more").addEventListener("click", more);
    $("csv").addEventListener("click", csv);
    $("model").addEventListener("change", (e) => { state.model = e.target.value; load(); });
    $("key-filter").addEventListener("change", (e) => { state.key = e.target.value; applyKeyFilter(); });
    $("tag-filter").addEventListener("change", (e) => { state.tag = e.target.value; renderRecent(); });
    document.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => {
      state.range = b.dataset.range;
      document.querySelectorAll("[data-range]").forEach((x) => x.classList.toggle("on", x === b));
      load();
    }));
    let resizeTimer = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { if (chart) chart.setSize({ width: Math.max(280, $("chart").clientWidth), height: chart.height }); }, 100);
    });
    if (t) start(t);
    else show("signin");
  });
})();
