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
  let state = { range: "24h", model: "", cursor: "", from: "", to: "" };
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
      const [usage, recent, keys] = await Promise.all([
        api("/ai/usage?" + p.toString()),
        api("/ai/usage/requests?limit=20"),
        api("/ai/usage?" + byKey.toString()),
      ]);
      if (seq !== loadSeq) return;
      show("dash");
      render(usage);
      renderKeys(keys.groups || []);
      state.cursor = recent.cursor || "";
      renderRecent(recent.requests, false);
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
    $("zone").textContent = "Times are shown in " + zone + ". Daily budgets reset at 00:00 UTC.";
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

  // renderKeys lists the range's spend by API key (the token's key claim;
  // requests without one as "no key"), most neurons first, as the API
  // orders them.
  function renderKeys(groups) {
    const tb = $("keys");
    tb.replaceChildren();
    const total = groups.reduce((a, g) => a + g.neurons, 0);
    for (const g of groups) {
      const tr = document.createElement("tr");
      tr.dataset.key = g.name;
      tr.dataset.value = String(g.neurons);
      tr.dataset.requests = String(g.requests);
      const name = document.createElement("td");
      name.className = g.name ? "key" : "key none";
      name.textContent = g.name || "no key";
      const req = document.createElement("td");
      req.className = "num";
      req.textContent = intFmt.format(g.requests);
      const neu = document.createElement("td");
      neu.className = "num";
      neu.textContent = fmtNeurons(g.neurons);
      const share = document.createElement("td");
      share.className = "share";
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = (total > 0 ? (100 * g.neurons) / total : 0).toFixed(1) + "%";
      bar.append(fill);
      share.append(bar);
      tr.append(name, req, neu, share);
      tb.append(tr);
    }
    $("keys-empty").hidden = groups.length > 0;
    document.querySelector(".keys").hidden = groups.length === 0;
  }

  function renderRecent(reqs, append) {
    const tb = $("recent");
    if (!append) tb.replaceChildren();
    for (const r of reqs) {
      const tr = document.createElement("tr");
      tr.dataset.requestId = r.id;
      const cell = (text, cls) => {
        const td = document.createElement("td");
        if (cls) td.className = cls;
        td.textContent = text;
        tr.append(td);
        return td;
      };
      const when = new Date(r.time);
      const time = cell(when.toDateString() === new Date().toDateString() ? clockFmt.format(when) : timeFmt.format(when));
      time.title = when.toString();
      cell(r.model, "model");
      const o = document.createElement("td");
      o.className = "outcome";
      const b = document.createElement("span");
      b.className = "badge o-" + r.outcome;
      b.textContent = outcomeNames[r.outcome] || r.outcome;
      o.append(b);
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
    const n = tb.children.length;
    $("recent-empty").hidden = n > 0;
    document.querySelector(".recent").hidden = n === 0;
    $("recent-count").textContent = n ? n + " shown, newest first" : "";
    $("more").hidden = !state.cursor;
  }

  async function more() {
    try {
      const r = await api("/ai/usage/requests?limit=20&cursor=" + encodeURIComponent(state.cursor));
      state.cursor = r.cursor || "";
      renderRecent(r.requests, true);
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
