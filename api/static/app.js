/* nccl-autotuner dashboard. Vanilla JS, no build step.
 *
 * The HTML pages are empty shells: everything shown comes from the /v1 JSON API, with the bearer
 * token kept in sessionStorage. Data is only ever put in the page as text (textContent, text nodes,
 * attributes set one by one): env values, errors and log tails are user-controlled.
 */
"use strict";

(() => {
  const TOKEN_KEY = "autotuner.token";
  const ACTIVE = new Set(["queued", "running", "confirming"]);
  const FAILED_STATES = ["failed", "timeout", "unknown"]; // launches the failed list shows
  const FAILED_PAGE = 20; // failed launches shown at first, and added by "Show more"
  const RECENT_LAUNCHES = 5; // the newest launches each poll reads (the one queued is among them)
  const FONT = getComputedStyle(document.body).fontFamily;
  const COLORS = {
    accent: "#2f62d6", accentStrong: "#1f4bb0", text: "#1b2330", muted: "#627083", faint: "#66717f",
    grid: "#edf0f4", base: "#1b2330", warn: "#c98300", bad: "#b8322a", ok: "#1d7a46",
  };

  // ---------------------------------------------------------------- formatting

  const fmtInt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const fmt2 = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const fmtDate = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short",
  });
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);
  // Past a billion no figure here is a real one (a row written by hand): said short, not 300 digits
  // wide that pushed the page sideways.
  const huge = (v) => Math.abs(v) >= 1e9;
  const num0 = (v) => (!isNum(v) ? "—" : huge(v) ? v.toExponential(2) : fmtInt.format(v));
  const num2 = (v) => (!isNum(v) ? "—" : huge(v) ? v.toExponential(2) : fmt2.format(v));
  // A speedup and its 95% CI in the notation of the claim's sentences (autotuner/cli/claim_report.py),
  // which the ladder shows as sent: "3.98x [3.26-4.87]". One notation on a page, not three.
  const times = (v) => (isNum(v) ? `${num2(v)}x` : "—");
  const interval = (lo, hi) => `[${num2(lo)}-${num2(hi)}]`;
  const withCi = (v, lo, hi) => `${times(v)} ${interval(lo, hi)}`;
  function pct(v) {
    if (!isNum(v)) return "—";
    if (v === 0) return "0";
    const p = v * 100;
    return `${p >= 10 ? p.toFixed(0) : p >= 1 ? p.toFixed(1) : p.toPrecision(2)}%`;
  }
  function when(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : fmtDate.format(d);
  }
  /** A time's tooltip: the instant in UTC, as the CLI prints it ("2026-12-07 08:43:05 UTC"). */
  function utc(iso) {
    const d = new Date(iso || NaN);
    return Number.isNaN(d.getTime()) ? null : `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
  }
  function ago(iso) {
    if (!iso) return "";
    const s = (Date.now() - new Date(iso).getTime()) / 1000;
    if (!Number.isFinite(s)) return "";
    if (s < 45) return "just now";
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }
  function duration(fromIso, toIso) {
    if (!fromIso) return "";
    const s = ((toIso ? new Date(toIso) : new Date()) - new Date(fromIso)) / 1000;
    if (!Number.isFinite(s) || s < 0) return "";
    if (s < 90) return `${Math.round(s)} s`;
    if (s < 5400) return `${Math.round(s / 60)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  }
  const envText = (env) => Object.entries(env || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  const precision = (f, b) => `${f}/${b}`;
  // Bidi controls in a stored string (a trial's text) are shown as escapes, never obeyed: U+202E would
  // make "evil" read "live".
  const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  const shownText = (s) => String(s).replace(BIDI, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  // Plotly reads a little HTML in labels; data-derived strings go through this first.
  const plain = (s) => shownText(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

  // ---------------------------------------------------------------- DOM

  /** el("td", {class: "num", title: t}, "text", childNode, ...) — strings become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      // Attributes (a title's tooltip) show bidi controls as escapes too, as text does.
      else node.setAttribute(key, value === true ? "" : shownText(value));
    }
    append(node, children);
    return node;
  }
  function append(node, children) {
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(shownText(child)));
    }
    return node;
  }
  /** Replace a node's children (skipping null / false: replaceChildren would print "null"). */
  function fill(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }
  const $ = (id) => document.getElementById(id);
  const setText = (id, text) => { const n = $(id); if (n) n.textContent = shownText(text ?? ""); };
  // A study started whose runner stopped (interrupted, killed): "running" alone read as if it ran.
  const runnerLost = (name) => "its runner stopped (interrupted, killed, or its host gone) and nothing runs it "
    + `now; \`autotuner tune --study ${name}\` resumes it, or a service's scheduler takes it up`;
  function badge(state, extra = "") {
    return el("span", { class: `badge s-${state} ${extra}`.trim() }, state);
  }
  function setBadge(node, state) {
    node.className = `badge s-${state}`;
    node.textContent = state;
  }
  function progressBar(fraction, state) {
    const bar = el("div", { class: "bar" });
    bar.style.width = `${Math.round(Math.max(0, Math.min(1, fraction || 0)) * 100)}%`;
    return el("div", { class: `progress ${state === "done" ? "done" : state === "failed" ? "failed" : ""}` }, bar);
  }

  // ---------------------------------------------------------------- API and auth

  class AuthNeeded extends Error {}
  class HttpError extends Error {
    constructor(status, detail) {
      super(`${status}: ${detail}`);
      this.status = status;
      this.detail = detail;
    }
  }

  /** GET a /v1 path: its JSON (text: its text; total: {data, total} with the X-Total-Count of a listing). */
  async function api(path, { text = false, total = false } = {}) {
    const headers = { Accept: text ? "text/plain" : "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token && tokenProblem(token)) {
      // Stored before the form checked (or by hand): fetch would throw on it at every retry, for ever.
      sessionStorage.removeItem(TOKEN_KEY);
      showTokenForm(tokenProblem(token));
      throw new AuthNeeded();
    }
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { headers, cache: "no-store" });
    if (response.status === 401) {
      // A read sent with no token, while the form already asks for one, leaves it (and why it asks) as is.
      if (token || $("token-form").hidden) showTokenForm(token ? "That token was not accepted (401): paste another one." : "");
      throw new AuthNeeded();
    }
    if (!response.ok) {
      let detail = response.statusText;
      try {
        const body = await response.json();
        detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
      } catch (_) { /* not JSON */ }
      throw new HttpError(response.status, detail);
    }
    authOk(Boolean(token));
    if (total) return { data: await response.json(), total: Number(response.headers.get("X-Total-Count")) || 0 };
    return text ? response.text() : response.json();
  }

  function showTokenForm(message) {
    $("token-form").hidden = false;
    $("token-error").hidden = !message;
    $("token-error").textContent = message || "";
    $("token-forget").hidden = !sessionStorage.getItem(TOKEN_KEY);
    setLive(false, "waiting for a token");
    if (document.activeElement !== $("token-input")) $("token-input").focus();
  }

  function authOk(withToken) {
    $("token-form").hidden = true;
    $("token-change").hidden = !withToken;
  }

  /** Why a pasted token cannot be one (null: it can). Tokens are printable ASCII; a header carries
   * Latin-1 only, so a curly quote from a chat or a document would make every fetch throw. */
  function tokenProblem(token) {
    const bad = [...token].find((c) => c < " " || c > "~");
    if (bad === undefined) return null;
    const code = `U+${bad.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
    return `That token has a character no token has (${code}${/\p{C}|\p{Z}/u.test(bad) ? "" : ` “${shownText(bad)}”`}): `
      + "tokens are printable ASCII. Paste it again, as plain text.";
  }

  function setupTokenForm() {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token-input").value.trim();
      if (!value) return;
      const problem = tokenProblem(value);
      if (problem) {
        showTokenForm(problem);
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, value);
      $("token-input").value = "";
      $("token-form").hidden = true;
      $("token-change").hidden = false; // reachable whatever the reads answer (the service may be down)
      restartLoops();
    });
    $("token-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showTokenForm("");
    });
    $("token-change").addEventListener("click", () => showTokenForm(""));
  }

  // ---------------------------------------------------------------- polling

  const loops = [];

  /** Run fn now and again after the delay it returns (ms; null stops). Waits for a token on 401.
   * The loop it returns runs again at once on tick(loop). */
  function every(fn) {
    const loop = { fn, timer: null, busy: false };
    loops.push(loop);
    tick(loop);
    return loop;
  }
  async function tick(loop) {
    clearTimeout(loop.timer);
    if (loop.busy) return;
    loop.busy = true;
    let next = 5000;
    try {
      next = await loop.fn();
      $("page-error").hidden = true;
    } catch (error) {
      if (error instanceof AuthNeeded) next = null; // resumes when a token is entered
      else showPageError(error);
    } finally {
      loop.busy = false;
    }
    if (next !== null && next !== undefined) loop.timer = setTimeout(() => tick(loop), next);
  }
  function restartLoops() { loops.forEach(tick); }

  function showPageError(error) {
    const node = $("page-error");
    node.hidden = false;
    node.textContent = error instanceof HttpError
      ? `The service answered ${error.status}: ${error.detail}`
      : `Cannot reach the service (${error.message || error}); retrying.`;
    // What was never loaded says so, where it would be: "Loading…" under the banner read as still coming.
    const why = `Not loaded: ${error instanceof HttpError ? `the service answered ${error.status}` : "the service could not be reached"}`
      + "; retrying every 5 s.";
    for (const placeholder of document.querySelectorAll("[data-loading]")) placeholder.textContent = why;
    for (const chart of document.querySelectorAll(".study-panels .chart:empty")) chartMessage(chart.id, why);
    // The token may be what is wrong: the form stays one click away whatever failed.
    if (sessionStorage.getItem(TOKEN_KEY)) $("token-change").hidden = false;
    setLive(false, "reconnecting");
  }

  function setLive(on, label) {
    const node = $("live");
    node.hidden = false;
    node.classList.toggle("paused", !on);
    setText("live-text", label);
  }

  // ---------------------------------------------------------------- charts

  const NICE_RATIOS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 1, 1.1, 1.2, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000];
  /** Round ratios for a log axis from lo to hi, evenly spread, always with 1× (the baseline). */
  function ratioTicks(lo, hi) {
    const gap = (Math.log10(hi) - Math.log10(lo)) / 6;
    const picked = [1];
    for (const v of NICE_RATIOS.filter((r) => r >= lo && r <= hi)) {
      if (picked.every((p) => Math.abs(Math.log10(v / p)) >= gap)) picked.push(v);
    }
    return picked.sort((a, b) => a - b);
  }
  const PLOT_CONFIG = { displayModeBar: false, responsive: true };
  function layout(extra) {
    return {
      font: { family: FONT, size: 12, color: COLORS.text },
      margin: { l: 56, r: 12, t: 8, b: 40 },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      hoverlabel: { font: { family: FONT, size: 12 }, bgcolor: "#fff", bordercolor: "#cfd4dc" },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11, color: COLORS.muted } },
      ...extra,
    };
  }
  const axis = (extra) => ({
    gridcolor: COLORS.grid, zeroline: false, linecolor: "#cfd4dc", tickfont: { color: COLORS.muted },
    title: { font: { size: 12, color: COLORS.muted } }, automargin: true, ...extra,
  });

  function chartMessage(id, message) {
    const node = $(id);
    node.removeAttribute("role"); // its message is text: read as it is
    node.removeAttribute("aria-label");
    if (window.Plotly && node.data) window.Plotly.purge(node);
    fill(node, el("div", { class: "chart-empty" }, message));
  }
  /** Draw a chart, with `summary` as its text alternative: a screen reader gets no SVG's numbers. */
  function plot(id, data, lay, summary) {
    const node = $(id);
    if (!window.Plotly) return chartMessage(id, "plotly.js did not load");
    node.setAttribute("role", "img");
    node.setAttribute("aria-label", shownText(summary));
    if (!node.data) node.replaceChildren();
    window.Plotly.react(node, data, lay, PLOT_CONFIG);
  }

  // ---------------------------------------------------------------- studies list

  const STUDIES_SHOWN = 200; // a page of the list, newest first; the pager reaches the older ones
  const STUDY_STATES = ["running", "confirming", "queued", "done", "failed", "cancelled"];

  function studiesPage() {
    const view = { offset: 0, counts: null };
    const loop = every(async () => {
      const offset = view.offset;
      const page = await api(`/v1/studies?limit=${STUDIES_SHOWN}${offset ? `&offset=${offset}` : ""}`);
      if (offset !== view.offset) return 0; // the pager moved meanwhile: read the page it asks for
      if (!page.data.length && offset > 0) { // studies removed since: back to the last page there is
        view.offset = Math.max(0, Math.floor((page.count - 1) / STUDIES_SHOWN) * STUDIES_SHOWN);
        return 0;
      }
      // The rows at once (with the last tick's counts): on a busy service the counts' seven requests
      // must not hold the list back.
      renderStudies(page, view.counts || {});
      renderStudiesPager(page, offset);
      // Each state's count is the API's (a listing's count for that state): counted from this page's
      // rows, it would leave out every study past the first page.
      const perState = await Promise.allSettled(STUDY_STATES.map((state) => api(`/v1/studies?state=${state}&limit=1`)));
      if (offset !== view.offset) return 0;
      // A count that could not be read leaves the states out (the list is still drawn), never guessed.
      const unread = perState.find((result) => result.status === "rejected");
      const counts = unread ? {} : Object.fromEntries(STUDY_STATES.map((state, i) => [state, perState[i].value.count]));
      view.counts = counts;
      renderStudies(page, counts);
      if (unread) throw unread.reason;
      const active = [...ACTIVE].some((state) => counts[state]);
      setLive(true, active ? "live · every 3 s" : "live");
      return 3000;
    });
    const move = (offset) => { view.offset = offset; tick(loop); };
    $("studies-prev").addEventListener("click", () => move(Math.max(0, view.offset - STUDIES_SHOWN)));
    $("studies-next").addEventListener("click", () => move(view.offset + STUDIES_SHOWN));
  }

  function renderStudiesPager(page, offset) {
    $("studies-pager").hidden = page.count <= STUDIES_SHOWN && offset === 0;
    const last = Math.min(offset + page.data.length, page.count);
    setText("studies-range", `${num0(offset + 1)}–${num0(last)} of ${num0(page.count)}, newest first`);
    $("studies-prev").disabled = offset === 0;
    $("studies-next").disabled = offset + STUDIES_SHOWN >= page.count;
  }

  function renderStudies(page, counts) {
    fill($("studies-summary"),
      el("span", { class: "stat" }, el("b", {}, num0(page.count)), page.count === 1 ? "study" : "studies"),
      ...STUDY_STATES
        .filter((state) => counts[state])
        .map((state) => el("span", { class: "stat" }, el("b", {}, num0(counts[state])), state)),
    );
    const rows = page.data.map((s) => {
      const budget = s.settings.trials;
      const outcome = s.outcome || {};
      return el("tr", {},
        el("td", {}, el("a", { class: "study-name", href: `/studies/${s.id}` }, s.name),
          el("span", { class: "sub" }, `#${s.id} · ${s.settings.executor || ""} · ${s.settings.nnodes || 1} node(s)`)),
        el("td", {}, s.cluster),
        el("td", {}, s.workload),
        el("td", {}, badge(s.state), s.runner_lost ? el("span", { class: "ran", title: runnerLost(s.name) }, "no runner") : null,
          s.error ? el("span", { class: "sub", title: s.error }, truncate(s.error, 60)) : null),
        el("td", {}, el("div", { class: "progress-cell" }, progressBar(s.progress, s.state),
          el("span", {}, budget ? `${s.launches_done} / ${budget}` : `${s.launches_done}`))),
        el("td", { class: "num strong" }, num0(s.best && s.best.samples_per_s)),
        el("td", { class: "num" }, speedupCell(outcome, keptServed(s))),
        el("td", { class: "num", title: utc(s.created_at) }, ago(s.created_at),
          el("span", { class: "sub" }, when(s.created_at))),
      );
    });
    const body = $("studies").tBodies[0];
    if (!rows.length) {
      rows.push(el("tr", { class: "placeholder" }, el("td", { colspan: 8 },
        "No studies yet. Start one with ", el("code", {}, "POST /v1/studies"), " or ",
        el("code", {}, "autotuner tune"), ".")));
    }
    fill(body, ...rows);
  }

  function speedupCell(outcome, nothingPublished) {
    const finalist = finalistText(outcome.finalist);
    if (nothingPublished) {
      return el("span", {}, el("span", { class: "faint" }, "—"),
        el("span", { class: "sub" }, `nothing published${finalist ? ` · finalist ${finalist}` : ""}`));
    }
    if (!isNum(outcome.speedup)) return el("span", { class: "faint" }, "—");
    const hasCi = isNum(outcome.ci_low) && isNum(outcome.ci_high);
    return el("span", {},
      el("span", { class: outcome.significant ? "gain" : "nogain" }, times(outcome.speedup)),
      el("span", { class: "sub" }, hasCi
        ? `95% CI ${interval(outcome.ci_low, outcome.ci_high)}${outcome.significant ? "" : " · not significant"}`
        : keptBaseline(outcome) ? `baseline kept${finalist ? ` · finalist ${finalist} not published` : ""}`
          : "not confirmed"));
  }

  /** The study published the baseline itself (a gain was measured, but e.g. its quality cost was not
   * ruled out): its 1.00× is the published config's, not best / baseline. */
  const keptBaseline = (o) => isNum(o.chosen_candidate) && o.chosen_candidate === o.baseline_candidate;
  /** The study ended publishing nothing though asked to (a phase could not be measured: an outage): the
   * config served before, if any, stays. Its outcome names the baseline as chosen, which is not served.
   * Its decision ends in the engine's words for it (autotuner.tuning.confirm.KEPT_SERVED). */
  const KEPT_SERVED = "nothing published (the config served before, if any, stays)";
  // A study whose search found nothing faster than the baseline (autotuner.tuning.confirm.BASELINE_BEST):
  // no finalist was confirmed, or compared, at all.
  const BASELINE_BEST = "the baseline was the fastest setting measured: published the baseline (no changes)";
  const keptServed = (study) => study.state === "done" && (study.settings || {}).publish !== false
    && !isNum((study.outcome || {}).published_version) && ((study.outcome || {}).decision || "").endsWith(KEPT_SERVED);
  // A study's intervals are at 95%; a version published again on a re-validation carries its look's (97.5%).
  const ciLevel = (c) => `${isNum(c) ? +(c * 100).toFixed(1) : 95}% CI`;

  /** "1.17x [1.14-1.19] (95% CI)": the finalist's own confirmation, or null. */
  function finalistText(f) {
    if (!f || !isNum(f.speedup)) return null;
    return isNum(f.ci_low) && isNum(f.ci_high)
      ? `${withCi(f.speedup, f.ci_low, f.ci_high)} (95% CI)` : times(f.speedup);
  }

  function truncate(text, n) {
    const s = String(text);
    return s.length > n ? `${s.slice(0, n - 1)}…` : s;
  }

  // ---------------------------------------------------------------- study page

  function studyPage() {
    const id = Number(document.body.dataset.studyId);
    const view = {
      sort: "id", order: "asc", state: "", offset: 0, limit: 50,
      launchSeq: {}, insightsKey: null, study: null, trialsKey: null,
      failedLimit: FAILED_PAGE, failed: null, launchCount: 0,
    };
    $("failed-show-more").addEventListener("click", () => {
      view.failedLimit += FAILED_PAGE;
      loadFailed().catch((error) => { if (!(error instanceof AuthNeeded)) showPageError(error); });
    });

    for (const th of $("trials").tHead.querySelectorAll("th[data-sort]")) {
      th.addEventListener("click", () => {
        const key = th.dataset.sort;
        if (view.sort === key) view.order = view.order === "asc" ? "desc" : "asc";
        else { view.sort = key; view.order = th.dataset.first || "asc"; }
        view.offset = 0;
        refreshTrials();
      });
    }
    for (const button of $("trial-filter").querySelectorAll("button")) {
      button.addEventListener("click", () => {
        view.state = button.dataset.state;
        view.offset = 0;
        refreshTrials();
      });
    }
    $("trials-prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); refreshTrials(); });
    $("trials-next").addEventListener("click", () => { view.offset += view.limit; refreshTrials(); });

    async function refreshTrials() {
      try { await loadTrials(); } catch (error) { if (!(error instanceof AuthNeeded)) showPageError(error); }
    }

    async function loadTrials() {
      const query = new URLSearchParams({ sort: view.sort, order: view.order, limit: view.limit, offset: view.offset });
      if (view.state) query.set("state", view.state);
      const page = await api(`/v1/studies/${id}/trials?${query}`);
      await loadLaunchSeqs(page.data.map((t) => t.launch_id));
      renderTrials(page, view);
    }

    /** The seq ("#3") of the launches a page of trials names: asked once per launch, never changes. */
    async function loadLaunchSeqs(launchIds) {
      const missing = [...new Set(launchIds)].filter((l) => !(l in view.launchSeq));
      if (!missing.length) return;
      const query = new URLSearchParams({ limit: 1000 });
      for (const l of missing) query.append("id", l);
      const found = await api(`/v1/studies/${id}/launches?${query}`);
      for (const l of missing) view.launchSeq[l] = null; // not found (not asked again): its id shows
      rememberSeqs(found);
    }
    const rememberSeqs = (launches) => { for (const l of launches) view.launchSeq[l.id] = l.seq; };

    /** The latest failed launches (a page), without their log tails: each is fetched when opened. */
    async function loadFailed() {
      const query = new URLSearchParams({ order: "desc", limit: view.failedLimit });
      for (const state of FAILED_STATES) query.append("state", state);
      view.failed = await api(`/v1/studies/${id}/launches?${query}`, { total: true });
      rememberSeqs(view.failed.data);
      renderFailed(view, id);
    }

    every(async () => {
      let study;
      try {
        study = await api(`/v1/studies/${id}`);
      } catch (error) {
        if (error instanceof HttpError && (error.status === 404 || error.status === 422)) { // 422: no id at all
          setText("study-name", `Study ${document.body.dataset.studyId} not found`);
          setText("study-meta", "It may have been removed, or the link is wrong.");
          // Nothing to show: no empty charts, no "Loading…" that never ends, no "None" failed launches.
          for (const node of document.querySelectorAll(".study-panels, .progress-row")) node.hidden = true;
          setLive(false, "not found");
          return null;
        }
        throw error;
      }
      view.study = study;
      // The newest few (a queued one says what it waits on) and how many in all: not every launch.
      const recent = await api(`/v1/studies/${id}/launches?order=desc&limit=${RECENT_LAUNCHES}`, { total: true });
      rememberSeqs(recent.data);
      view.launchCount = recent.total;
      renderHead(study, recent);
      renderOutcome(study);
      await loadTrials();
      await loadFailed();
      // The charts' data (MBs in a long study) is fetched again only when a launch ended or the state moved.
      const key = JSON.stringify([study.state, study.trial_counts, study.launches_done]);
      if (key !== view.insightsKey) {
        renderCharts(await api(`/v1/studies/${id}/insights`), study);
        view.insightsKey = key;
      }
      const active = ACTIVE.has(study.state);
      setLive(active, active ? "live · every 2 s" : `study ${study.state}`);
      return active ? 2000 : 15000;
    });
  }

  function renderHead(study, recent) {
    document.title = `${study.name} · nccl-autotuner`;
    setText("crumb", study.name);
    setText("study-name", study.name);
    setBadge($("study-state"), study.state);
    const s = study.settings;
    const meta = $("study-meta");
    const item = (label, value) => el("span", {}, `${label} `, el("b", {}, value));
    fill(meta, 
      item("cluster", study.cluster), item("workload", study.workload),
      item("executor", `${s.executor} · ${s.nnodes} × ${s.nproc_per_node}`),
      item("sampler", `${s.sampler}, seed ${s.seed}`),
      item("created", when(study.created_at)),
      study.started_at ? item(study.finished_at ? "ran" : "running for", duration(study.started_at, study.finished_at)) : null,
      s.fabric ? item("emulated fabric", s.fabric) : null,
    );
    const bar = $("study-progress");
    bar.style.width = `${Math.round((study.progress || 0) * 100)}%`;
    bar.parentElement.className = `progress large ${study.state === "done" ? "done" : study.state === "failed" ? "failed" : ""}`;
    const counts = study.trial_counts || {};
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const phase = { queued: "queued", running: "searching", confirming: "confirming best vs baseline" }[study.state];
    // A launch in the scheduler's queue says what it waits on (Slurm's reason), not "running".
    const waiting = recent.data.find((l) => l.state === "pending" && l.waiting_on);
    setText("study-progress-text", [
      s.trials ? `${study.launches_done} / ${s.trials} search launches` : `${study.launches_done} search launches`,
      `${num0(recent.total)} launches in all`,
      `${num0(total)} trials (${num0(counts.ok || 0)} ok, ${num0(counts.infeasible || 0)} infeasible, ${num0(counts.failed || 0)} failed)`,
      phase,
      waiting && ACTIVE.has(study.state) ? `launch #${waiting.seq} queued: ${shownText(waiting.waiting_on)}` : null,
    ].filter(Boolean).join(" · "));
    const error = $("study-error");
    const said = [study.runner_lost ? `No runner: ${runnerLost(study.name)}` : "", shownText(study.error || "")];
    error.hidden = !said.some(Boolean);
    error.textContent = said.filter(Boolean).join(" · ");
  }

  const pointText = (point) => `${precision(point.fwd_precision, point.bwd_precision)} · batch ${num0(point.batch_size)}`;

  // How a study that will get no more launches ended, for the words that would otherwise say "yet".
  const ENDED_HOW = { cancelled: "was cancelled", failed: "failed" };

  /** How an ended study that confirmed nothing ended: no "so far" or "yet", nothing more will come. */
  function endedUnconfirmed(study) {
    const published = isNum((study.outcome || {}).published_version);
    return `The study ${ENDED_HOW[study.state] || "ended"} before a finalist was confirmed`
      + `${published ? "" : ": nothing was published"}.`;
  }

  /** What was published when it is not the fastest row measured: its trial, env and confirmed throughput. */
  function publishedText(outcome, published) {
    if (keptBaseline(outcome)) return el("span", {}, "the baseline itself (no overrides): see the decision");
    const row = published && published.id === outcome.chosen_candidate ? published : null;
    return el("span", {}, `${outcome.chosen_candidate} (tagged in the trials table)`,
      row ? el("span", {}, " · ", envText(row.env) ? el("code", {}, envText(row.env)) : "defaults (no overrides)",
        el("span", { class: "faint" }, ` · ${pointText(row)}`)) : null,
      isNum(outcome.tuned_samples_per_s) ? ` · ${num0(outcome.tuned_samples_per_s)} samples/s when confirmed` : null,
      el("span", { class: "faint" }, " · the speedup beside is its own"));
  }

  function renderOutcome(study) {
    const best = study.best;
    const base = study.baseline;
    const outcome = study.outcome || {};
    const active = ACTIVE.has(study.state);
    // The fastest row measured need not be what was published (an inert knob's luck, a quality cost, the
    // baseline kept): then each is named, so nobody reads the fastest one's env as the published one.
    const chosen = outcome.chosen_candidate;
    const fastestOnly = Boolean(best) && isNum(chosen) && chosen !== best.id;
    setText("kpi-best-label", fastestOnly ? "Fastest measured (not published)" : "Best");
    setText("kpi-best", num0(best && best.samples_per_s));
    setText("kpi-best-sub", best ? `${pointText(best)}${fastestOnly ? ` · trial ${best.id}` : ""}`
      : active ? "no measurement yet" : "no measurement");
    setText("kpi-base", num0(base && base.samples_per_s));
    setText("kpi-base-sub", base ? pointText(base) : active ? "measured first" : "not measured");
    const bestEnv = $("best-env");
    if (best) {
      // A variable that cannot act where the study measures was set in the trial, but is never exported:
      // shown apart, so that "Best env NCCL_NET=Socket" is not read as what jobs get.
      const inert = study.inert || {};
      const acting = Object.fromEntries(Object.entries(best.env || {}).filter(([k]) => !(k in inert)));
      const idle = Object.fromEntries(Object.entries(best.env || {}).filter(([k]) => k in inert));
      fill(bestEnv, el("span", { class: "k" }, fastestOnly ? "Fastest measured env (not published)" : "Best env"),
        envText(acting) ? el("code", {}, envText(acting)) : el("span", { class: "faint" }, "defaults (no overrides)"),
        envText(idle) ? el("span", { class: "faint", title: Object.keys(idle).map((k) => `${k}: ${inert[k]}`).join("\n") },
          ` · also set, inert here (never exported): ${envText(idle)}`) : null,
        best.sharding ? el("span", { class: "faint" }, ` · ${best.sharding}`) : null);
    } else {
      fill(bestEnv);
    }
    const publishedEnv = $("published-env");
    publishedEnv.hidden = !fastestOnly;
    fill(publishedEnv, ...(!fastestOnly ? [] : keptServed(study)
      ? [el("span", { class: "k" }, "Published"), el("span", {}, "nothing: see the decision")]
      : [el("span", { class: "k" }, "Published trial"), publishedText(outcome, study.published)]));
    const hasCi = isNum(outcome.ci_low) && isNum(outcome.ci_high);
    if (keptServed(study)) {
      const finalist = finalistText(outcome.finalist);
      setText("kpi-speedup-label", "Published speedup");
      setText("kpi-speedup", "—");
      setText("kpi-speedup-sub", `nothing published: the config served before, if any, stays${finalist ? ` · finalist ${finalist}` : ""}`);
      setText("kpi-speedup-note", "");
      $("kpi-speedup").className = "kpi-value";
    } else if (isNum(outcome.speedup)) {
      setText("kpi-speedup-label", hasCi ? `Confirmed speedup${fastestOnly ? " (published)" : ""}` : "Speedup");
      setText("kpi-speedup-note", hasCi ? `${outcome.rounds} interleaved rounds${outcome.significant ? "" : " · not significant"}` : "");
      setText("kpi-speedup", times(outcome.speedup));
      setText("kpi-speedup-sub", hasCi
        ? `95% CI ${interval(outcome.ci_low, outcome.ci_high)}`
        : keptBaseline(outcome) ? "the baseline was kept: nothing changed" : "best / baseline, not confirmed");
      if (!hasCi && keptBaseline(outcome)) setText("kpi-speedup-label", "Published speedup");
      $("kpi-speedup").className = `kpi-value ${outcome.significant ? "accent" : ""}`;
    } else if (best && base && isNum(best.samples_per_s) && isNum(base.samples_per_s)) {
      // Only a study still running will confirm it: one that ended says how it ended instead.
      setText("kpi-speedup-label", active ? "Speedup so far" : "Best / baseline, never confirmed");
      setText("kpi-speedup", times(best.samples_per_s / base.samples_per_s));
      setText("kpi-speedup-sub", active ? "provisional, until confirmed" : endedUnconfirmed(study));
      setText("kpi-speedup-note", "");
      $("kpi-speedup").className = "kpi-value";
    } else {
      setText("kpi-speedup-label", "Speedup");
      setText("kpi-speedup", "—");
      setText("kpi-speedup-sub", active || study.state === "done" ? "" : endedUnconfirmed(study));
      setText("kpi-speedup-note", "");
    }
    setText("outcome-hint", study.state === "done"
      ? (keptServed(study) ? "nothing published" : hasCi ? "confirmed" : keptBaseline(outcome) ? "baseline kept" : "not confirmed")
      : active ? "provisional" : hasCi ? "" : "never confirmed");

    if (hasCi) {
      // Log axis: the interval is multiplicative (a t-interval on log ratios) and may be wide.
      const lo = Math.min(0.9, outcome.ci_low / 1.15);
      const hi = Math.max(1.12, outcome.ci_high * 1.15);
      const ticks = ratioTicks(lo, hi);
      const color = outcome.significant ? COLORS.accent : "#9aa5b4";
      const speedupSummary = `Speedup ${withCi(outcome.speedup, outcome.ci_low, outcome.ci_high)} (95% CI) over the `
        + `baseline, ${outcome.rounds} interleaved rounds${outcome.significant ? "" : ", not significant"}`;
      plot("chart-speedup", [{
        type: "scatter", mode: "lines", x: [outcome.ci_low, outcome.ci_high], y: [0, 0], hoverinfo: "skip",
        line: { color, width: 8 }, opacity: 0.45,
      }, {
        type: "scatter", mode: "markers", x: [outcome.speedup], y: [0],
        marker: { color: outcome.significant ? COLORS.accentStrong : COLORS.text, size: 13, symbol: "diamond",
          line: { color: "#fff", width: 1.5 } },
        hovertemplate: `speedup %{x:.3f}x<br>95% CI [${outcome.ci_low.toFixed(3)}-${outcome.ci_high.toFixed(3)}]<extra></extra>`,
      }], layout({
        margin: { l: 8, r: 8, t: 4, b: 24 }, showlegend: false,
        xaxis: axis({ type: "log", range: [Math.log10(lo), Math.log10(hi)], tickvals: ticks,
          ticktext: ticks.map((v) => `${v}x`), tickangle: 0, title: { text: "" }, gridcolor: "rgba(0,0,0,0)" }),
        yaxis: { visible: false, range: [-1, 1] },
        shapes: [{ type: "line", x0: 1, x1: 1, y0: 0, y1: 1, yref: "paper", line: { color: COLORS.faint, dash: "dot", width: 1.5 } }],
        annotations: [{ x: 1, y: 1, yref: "paper", text: "baseline", showarrow: false, xanchor: "right", yanchor: "top", xshift: -4,
          font: { size: 11, color: COLORS.faint } }],
      }), speedupSummary);
    } else {
      const finalist = finalistText(outcome.finalist);
      chartMessage("chart-speedup", ACTIVE.has(study.state)
        ? "The 95% interval appears once the best is re-measured against the baseline."
        : finalist && keptBaseline(outcome)
          ? `The finalist measured ${finalist} against the baseline`
            + `${isNum(outcome.finalist.rounds) ? ` over ${outcome.finalist.rounds} rounds` : ""}, but was not published: see the decision.`
          : study.state === "done" || isNum(outcome.speedup) ? "No confidence interval for this study."
            : `No confidence interval: the study ${ENDED_HOW[study.state] || "ended"} before a finalist was confirmed.`);
    }

    renderLadder(outcome, study);
    renderScaling(outcome.scaling || []);

    const decision = $("decision");
    const lines = [];
    if (outcome.decision) lines.push(el("div", { class: "line" }, el("span", { class: "k" }, "Decision"), el("span", {}, outcome.decision)));
    if (isNum(outcome.published_version)) {
      lines.push(el("div", { class: "line" }, el("span", { class: "k" }, "Published"),
        el("span", {}, el("span", { class: "badge version" }, `v${outcome.published_version}`), " for ",
          el("a", { href: "/configs" }, `${study.cluster} / ${study.workload}`))));
    } else if (study.state === "done") {
      // publish off, or a phase that could not be measured (an outage): then the served config stays
      const why = (study.settings || {}).publish === false ? "nothing (publish off)" : "nothing: the config served before, if any, stays";
      lines.push(el("div", { class: "line" }, el("span", { class: "k" }, "Published"), el("span", { class: "faint" }, why)));
    }
    fill(decision, ...lines);
  }

  // The claim as a waterfall: the baseline, then each knob group's gain; a step whose 95% interval
  // includes 1 added nothing (its knob is not published) and is drawn flat and grey. Its words (labels,
  // the quality line, the inert knobs) come written from the server: the CLI prints the same.
  function renderLadder(outcome, study) {
    const ladder = outcome.ladder || [];
    const claim = study.claim || {};
    const words = claim.ladder || [];
    setText("ladder-quality", claim.quality || "");
    setText("ladder-inert", (claim.inert || []).join("\n"));
    if (!ladder.length) {
      // A confirmed finalist without steps: the ladder was skipped, or the study predates it (no
      // ladder stored at all); neither says the finalist failed its confirmation.
      const confirmed = (outcome.finalist || outcome).significant === true;
      // Only a study still running will measure it; one that failed or was cancelled never will.
      const ended = ENDED_HOW[study.state];
      chartMessage("chart-ladder", ACTIVE.has(study.state) ? "The ladder is measured after the finalist is confirmed."
        : ended ? `No ladder: the study ${ended} before the ladder was measured.`
        : (outcome.decision || "").endsWith(BASELINE_BEST)
          ? "No ladder: no setting measured beat the baseline, so no finalist was compared with it."
        : !confirmed ? "No ladder: the finalist was not confirmed faster than the baseline."
        : outcome.ladder ? "No ladder: this study skipped it (ladder_rounds 0)."
        : "No ladder: this study ran before ladders were measured.");
      return;
    }
    let before = 1;
    const rel = ladder.map((s) => { const d = s.kept ? s.cumulative - before : 0; before = s.cumulative; return d; });
    // Narrow (a phone): the full labels would be shrunk to an unreadable size above the bars, so the bars
    // carry the step's gain alone and the full words are written under the chart, one step a line.
    const narrow = $("chart-ladder").clientWidth < 560;
    const lines = $("ladder-lines");
    lines.hidden = !narrow;
    fill(lines, ...(narrow ? words.map((w) => el("span", { class: "step" }, w.line || "")) : []));
    const text = ladder.map((s, i) => {
      const label = (words[i] || {}).label || [];
      return narrow ? plain(String(label[0] || "").split(" ")[0]) : label.map(plain).join("<br>");
    });
    const changes = ladder.map((s, i) => plain((words[i] || {}).change || ""));
    plot("chart-ladder", [{
      // An env step is named by its variables (the env is climbed a variable at a time): each bar its
      // own category, its name broken into lines so that long variable names stay readable.
      type: "waterfall", orientation: "v",
      x: ["baseline", ...ladder.map((s, i) => plain((words[i] || {}).name || s.step).replace(/[ +]/g, (c) => (c === "+" ? "+<br>" : "<br>")))],
      measure: ["absolute", ...ladder.map(() => "relative")], y: [1, ...rel],
      text: ["1.00x", ...text], textposition: "outside", cliponaxis: false, constraintext: narrow ? "none" : "both",
      customdata: ["the job's own settings", ...changes],
      hovertemplate: "%{x}<br>%{customdata}<extra></extra>",
      increasing: { marker: { color: COLORS.accent } }, decreasing: { marker: { color: COLORS.bad } },
      totals: { marker: { color: COLORS.base } }, connector: { line: { color: "#cfd4dc" } },
    }], layout({
      showlegend: false,
      // A phone tilts the steps' names: the margin grows to hold them ("env NSOCKS_PERTHREAD" was cut).
      xaxis: { automargin: true },
      yaxis: axis({ title: { text: "speedup over the baseline" }, ticksuffix: "x", rangemode: "tozero" }),
      margin: { l: 64, r: 16, t: 26, b: 40 },
    }), `Speedup ladder from the baseline, one knob group at a time: ${words.map((w) => w.line).filter(Boolean).join("; ")}`);
  }

  // The published case's own measure: throughput as nodes are added, against the ideal line.
  function renderScaling(curve) {
    $("panel-scaling").hidden = !curve.length;
    if (!curve.length) return;
    const nodes = curve.map((p) => p.nodes);
    const line = (role, name, color) => ({
      type: "scatter", mode: "lines+markers", name, x: nodes, y: curve.map((p) => p[`${role}_samples_per_s`]),
      customdata: curve.map((p) => [p[`${role}_scaling`], p[`${role}_efficiency`]]),
      line: { color, width: 2 }, marker: { size: 8 },
      hovertemplate: `${name}: %{y:,.0f} samples/s at %{x} nodes<br>factor %{customdata[0]:.2f}x, efficiency %{customdata[1]:.0%}<extra></extra>`,
    });
    const base = curve[0].tuned_samples_per_s;
    const ideal = isNum(base) ? { type: "scatter", mode: "lines", name: "ideal (tuned)", x: nodes,
      y: nodes.map((n) => base * n / nodes[0]), line: { color: COLORS.faint, dash: "dot", width: 1.5 }, hoverinfo: "skip" } : null;
    plot("chart-scaling", [line("baseline", "baseline", COLORS.base), line("tuned", "tuned", COLORS.accent), ideal].filter(Boolean),
      layout({
        xaxis: axis({ title: { text: "nodes" }, tickvals: nodes }),
        yaxis: axis({ title: { text: "samples/s" }, tickformat: ",.0f", rangemode: "tozero" }),
        margin: { l: 64, r: 12, t: 26, b: 40 },
      }), `Scaling, samples/s tuned vs baseline: ${curve.map((p) => `${p.nodes} node(s) ${num0(p.tuned_samples_per_s)} vs `
        + `${num0(p.baseline_samples_per_s)}`).join("; ")}`);
  }

  function renderTrials(page, view) {
    const study = view.study || {};
    const bestId = study.best && study.best.id;
    const baseId = study.baseline && study.baseline.id;
    const publishedId = (study.outcome || {}).chosen_candidate; // tagged where it is not the best
    const rows = [];
    for (const t of page.data) {
      const effective = t.effective_fwd_precision && (t.effective_fwd_precision !== t.fwd_precision || t.effective_bwd_precision !== t.bwd_precision);
      const qerr = [t.quant_error_fwd, t.quant_error_bwd].filter(isNum);
      const env = envText(t.env);
      const tr = el("tr", { class: [t.error ? "has-error" : "", t.id === bestId ? "row-best" : ""].join(" ").trim() || null, dataset: { trial: t.id } },
        el("td", { class: "num" }, t.id === bestId ? el("span", { class: "tag best", title: "best trial" }, "best") : null,
          t.id === baseId ? el("span", { class: "tag base", title: "the baseline: no overrides, fp32" }, "base") : null,
          t.id === publishedId && t.id !== bestId && t.id !== baseId
            ? el("span", { class: "tag published", title: "measured what was published" }, "published") : null, " ", String(t.id)),
        el("td", { class: "num" }, `#${view.launchSeq[t.launch_id] ?? t.launch_id}`),
        el("td", {}, el("span", { class: "tag" }, t.kind)),
        el("td", { class: "env", title: env || "no overrides" }, env || el("span", { class: "faint" }, "defaults")),
        el("td", {}, precision(t.fwd_precision, t.bwd_precision),
          effective ? el("span", { class: "ran", title: "what actually ran" }, `ran ${precision(t.effective_fwd_precision, t.effective_bwd_precision)}`) : null),
        el("td", { class: "num" }, num0(t.batch_size)),
        el("td", {}, t.sharding),
        el("td", {}, t.pipeline || "—"),
        el("td", { class: "num strong" }, num0(t.samples_per_s)),
        el("td", { class: "num" }, num2(t.a2a_ms)),
        el("td", { class: "num", title: qerr.length ? `fwd ${t.quant_error_fwd ?? "—"}, bwd ${t.quant_error_bwd ?? "—"} (relative L2)` : null },
          qerr.length ? pct(Math.max(...qerr)) : "—"),
        el("td", {}, badge(t.state)),
      );
      rows.push(tr);
      if (t.error) {
        rows.push(el("tr", { class: "error-row" }, el("td", { colspan: 12 },
          el("div", { class: `err-text ${t.state === "failed" ? "" : "warn"}` }, t.error))));
      }
    }
    if (!rows.length) {
      rows.push(el("tr", { class: "placeholder" }, el("td", { colspan: 12 },
        view.state ? `No ${view.state} trials.` : noTrialsText(study))));
    }
    fill($("trials").tBodies[0], ...rows);
    for (const th of $("trials").tHead.querySelectorAll("th[data-sort]")) {
      if (th.dataset.sort === view.sort) th.setAttribute("aria-sort", view.order === "asc" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    for (const button of $("trial-filter").querySelectorAll("button")) {
      button.classList.toggle("on", button.dataset.state === view.state);
      const n = button.dataset.state ? (study.trial_counts || {})[button.dataset.state] || 0 : null;
      button.textContent = button.dataset.state ? `${button.dataset.state} ${num0(n)}` : "All";
    }
    setText("trials-count", num0(page.count));
    const first = page.count ? view.offset + 1 : 0;
    setText("trials-range", `${num0(first)}–${num0(Math.min(view.offset + view.limit, page.count))} of ${num0(page.count)}`);
    $("trials-prev").disabled = view.offset === 0;
    $("trials-next").disabled = view.offset + view.limit >= page.count;
  }

  /** The trials table with no rows: true to the study's state (an ended study will get none). */
  function noTrialsText(study) {
    if (study.state === "queued") return "No trials yet: the study is queued.";
    if (ACTIVE.has(study.state)) return "No trials yet: the first launch is running.";
    if (study.state === "failed") return "No trials: the study failed before any was measured.";
    if (study.state === "cancelled") return "No trials: the study was cancelled before any was measured.";
    return "No trials.";
  }

  /** The failed list, changed only where it changed: a poll that finds the same launches leaves the
   * page as it is (an open log tail, a selection in it, stay). */
  function renderFailed(view, studyId) {
    const { data: failed, total } = view.failed;
    setText("failed-count", total ? num0(total) : "");
    const rest = total - failed.length;
    $("failed-more").hidden = rest <= 0;
    setText("failed-rest", `Showing the latest ${num0(failed.length)} of ${num0(total)}.`);
    $("failed-show-more").textContent = `Show ${num0(Math.min(FAILED_PAGE, rest))} more`;
    const list = $("failed-list");
    if (!failed.length) {
      // A study that ended before its first launch has none that ran to the end either.
      const text = view.launchCount ? "None: every launch ran to the end." : "No launches.";
      if (list.textContent !== text) fill(list, el("p", { class: "empty" }, text));
      return;
    }
    const shown = new Map([...list.children].map((node) => [FAILED_KEYS.get(node), node]));
    const wanted = failed.map((l) => {
      const key = JSON.stringify(l); // a launch whose row changed (a state read late) is drawn anew
      return shown.get(key) || failedLaunch(l, key, studyId);
    });
    for (const node of [...list.children]) if (!wanted.includes(node)) node.remove();
    // Only a node out of place is moved: a newer failure goes on top, the others stay put.
    wanted.forEach((node, i) => { if (list.children[i] !== node) list.insertBefore(node, list.children[i] || null); });
  }

  const FAILED_KEYS = new WeakMap(); // an article of the failed list -> the row it shows (JSON)

  function failedLaunch(l, key, studyId) {
    const article = el("article", { class: "failed-launch", dataset: { launch: l.id } },
      el("header", {}, badge(l.state), el("b", {}, `Launch #${l.seq}`),
        el("span", { class: "tag" }, l.kind), l.attempt > 1 ? el("span", { class: "tag" }, `attempt ${l.attempt}`) : null,
        el("span", { class: "muted mono" }, envText(l.env) || "default env"),
        el("span", { class: "faint" }, [l.executor, l.backend_id, (l.finished_at || l.started_at) && when(l.finished_at || l.started_at)]
          .filter(Boolean).join(" · "))),
      el("div", { class: "reason" }, l.error || "no reason recorded"),
      l.log_tail_chars ? logTail(l, studyId) : el("p", { class: "empty", style: "padding: 0 12px" }, "No log output."),
    );
    FAILED_KEYS.set(article, key);
    return article;
  }

  /** A launch's log tail, folded: fetched (up to 16 KB) the first time it is opened. */
  function logTail(l, studyId) {
    const pre = el("pre", { class: "log" }, "Loading…");
    const details = el("details", { class: "log-tail" },
      el("summary", {}, `Log tail (${num0(l.log_tail_chars)} characters)`), pre);
    let asked = false;
    details.addEventListener("toggle", async () => {
      if (!details.open || asked) return;
      asked = true;
      try {
        const full = await api(`/v1/studies/${studyId}/launches/${l.id}`);
        pre.textContent = shownText(full.log_tail || "No log output.");
      } catch (error) {
        asked = false; // asked again when opened again
        pre.textContent = error instanceof AuthNeeded ? "A token is needed to read it."
          : shownText(`Could not load it (${error.message || error}); close and open it to try again.`);
      }
    });
    return details;
  }

  function renderCharts(insights, study) {
    renderHistory(insights.history, study);
    renderImportance(insights.importance, study);
    renderMatrix(insights.matrix, study);
    renderBreakdown(insights.breakdown || [], study);
  }

  // The step as a stacked bar per candidate: compute, then the comm it did not hide (together the
  // step). The wire time of each kind of comm overlaps them, so it is said on hover, not stacked.
  function renderBreakdown(rows, study) {
    if (!rows.length) {
      // Why: the step's parts come from the training workload's own timers, which a replay never has.
      const replay = (study.settings || {}).executor === "replay";
      chartMessage("chart-breakdown", replay ? "No step breakdown: the replay executor replays samples/s only, "
        + "without the compute and comm times of a step."
        : ACTIVE.has(study.state) ? "No step measured yet: it appears with the first trial that reports its compute and comm times."
        : "No step breakdown: no completed trial reported its compute and comm times.");
      return;
    }
    const ordered = [...rows].reverse();
    // "#8 int8/int8 b1024 sparse_dist": a pipeline every row shares is said once, in the hint, so the
    // labels leave the bars room (at 390 px they took the whole chart).
    const words = rows.map((r) => String(r.label).split(" "));
    const pipeline = words.every((w) => w.length === 4 && w[3] === words[0][3]) ? words[0][3] : null;
    const short = (r) => (pipeline ? String(r.label).split(" ").slice(0, 3).join(" ") : r.label);
    setText("breakdown-hint", "median per training step: compute and the comm it did not hide"
      + (pipeline ? ` · pipeline ${pipeline} for all` : ""));
    const narrow = $("chart-breakdown").clientWidth < 560;
    const labels = ordered.map((r) => plain(r.kind === "baseline" ? `${short(r)} (baseline)` : short(r)));
    const wire = ordered.map((r) => `on the wire: input dist ${num2(r.input_dist)} ms, sparse ${num2(r.sparse_comm)} ms, `
      + `dense all-reduce ${num2(r.dense_comm)} ms<br>step ${num2(r.step_ms)} ms · ${num0(r.samples_per_s)} samples/s`);
    const part = (key, name, color) => ({
      type: "bar", orientation: "h", name, y: labels, x: ordered.map((r) => r[key]), customdata: wire,
      marker: { color }, hovertemplate: `${name} %{x:.2f} ms<br>%{customdata}<extra></extra>`,
    });
    const height = Math.max(220, 40 + (narrow ? 44 : 28) * rows.length);
    $("chart-breakdown").style.height = `${height}px`; // the panel grows with the bars, none drawn past it
    plot("chart-breakdown", [
      part("compute", "compute", COLORS.accent),
      part("exposed_comm", "exposed comm", COLORS.warn),
    ], layout({
      barmode: "stack",
      legend: { ...layout({}).legend, traceorder: "normal" },
      xaxis: axis({ title: { text: "ms per step (median)" }, rangemode: "tozero", nticks: narrow ? 5 : 0 }),
      // Narrow: each label sits above its bar, so the bars get the chart's whole width.
      yaxis: axis({ gridcolor: "rgba(0,0,0,0)", ticksuffix: "  ", automargin: true, showticklabels: !narrow }),
      annotations: narrow ? labels.map((label) => ({
        x: 0, xref: "paper", y: label, yref: "y", text: label, showarrow: false, xanchor: "left", yanchor: "bottom",
        yshift: 7, font: { size: 11, color: COLORS.muted },
      })) : [],
      margin: { l: 12, r: 16, t: 26, b: 40 },
      bargap: narrow ? 0.55 : 0.3,
      height,
    }), `Median step time: ${rows.map((r) => `${r.label}${r.kind === "baseline" ? " (baseline)" : ""} `
      + `${num2(r.compute)} ms compute + ${num2(r.exposed_comm)} ms exposed comm`).join("; ")}`);
  }

  function renderHistory(points, study) {
    const measured = points.filter((p) => isNum(p.samples_per_s));
    if (!measured.length) {
      chartMessage("chart-history", ACTIVE.has(study.state) ? "Waiting for the first measurement…" : "No measurements.");
      return;
    }
    const hover = (p) => `trial ${p.id} · ${plain(p.kind)}<br>${plain(p.precision)} · batch ${fmtInt.format(p.batch_size)}`
      + `<br>${plain(envText(p.env) || "default env")}`;
    const series = (filter, name, marker) => {
      const sel = measured.filter(filter);
      return {
        type: "scatter", mode: "markers", name, x: sel.map((p) => p.n), y: sel.map((p) => p.samples_per_s),
        text: sel.map(hover), hovertemplate: "%{y:,.0f} samples/s<br>%{text}<extra></extra>", marker,
      };
    };
    const failed = points.filter((p) => p.state === "failed").length;
    setText("history-hint", `samples/s of each trial, best so far${failed ? ` · ${failed} failed not shown` : ""}`);
    plot("chart-history", [
      series((p) => p.kind === "baseline", "baseline", { color: COLORS.base, size: 10, symbol: "diamond" }),
      series((p) => p.kind !== "baseline" && p.state === "ok", "trial", { color: COLORS.accent, size: 8, opacity: 0.75 }),
      series((p) => p.kind !== "baseline" && p.state === "infeasible", "infeasible (quant. error)",
        { color: COLORS.warn, size: 8, symbol: "circle-open", line: { width: 2 } }),
      {
        type: "scatter", mode: "lines", name: "best so far", line: { color: COLORS.accentStrong, width: 2, shape: "hv" },
        x: points.filter((p) => isNum(p.best_so_far)).map((p) => p.n),
        y: points.filter((p) => isNum(p.best_so_far)).map((p) => p.best_so_far),
        hovertemplate: "best so far %{y:,.0f}<extra></extra>",
      },
    ], layout({
      // A few trials: plotly steps the axis by 0.5, and "d" rounds each half to a whole: 0 1 1 2 2 3 3.
      xaxis: axis({ title: { text: "trial (in order measured)" }, tickformat: "d", rangemode: "tozero",
        ...(Math.max(...points.map((p) => p.n)) <= 8 ? { dtick: 1 } : {}) }),
      yaxis: axis({ title: { text: "samples/s" }, tickformat: ",.0f", rangemode: "tozero" }),
      margin: { l: 64, r: 12, t: 26, b: 40 },
    }), historySummary(measured, points));
  }

  function historySummary(measured, points) {
    const best = Math.max(...measured.map((p) => p.samples_per_s));
    const base = measured.find((p) => p.kind === "baseline");
    return `Optimization history: ${num0(measured.length)} of ${num0(points.length)} trials measured, best `
      + `${num0(best)} samples/s${base ? ` vs baseline ${num0(base.samples_per_s)}` : ""}`;
  }

  const PARAM_LABELS = { precision: "precision fwd/bwd", batch_size: "batch size", sharding: "sharding", num_threads: "threads", pipeline: "pipeline" };

  function renderImportance(importance, study) {
    const params = (importance && importance.params) || [];
    if (!params.length) {
      setText("importance-hint", "Optuna PED-ANOVA");
      // A study that has ended will not get more trials: "yet" would promise a ranking that never comes.
      const later = ACTIVE.has(study.state) ? "Not available yet" : "Not available";
      chartMessage("chart-importance", `${later}: ${(importance && importance.reason) || "no data"}.`);
      return;
    }
    const sorted = [...params].sort((a, b) => a.importance - b.importance);
    const floor = isNum(importance.noise_floor) ? importance.noise_floor : null;
    const under = sorted.filter((p) => p.below_noise).length;
    setText("importance-hint", `Optuna PED-ANOVA over ${num0(importance.trials)} completed trials`
      + (floor !== null ? ` · grey: no more than a random dimension gets (${pct(floor)} of the total)${under ? `, ${under} knob(s)` : ""}` : ""));
    plot("chart-importance", [{
      type: "bar", orientation: "h",
      x: sorted.map((p) => p.importance), y: sorted.map((p) => plain(PARAM_LABELS[p.name] || p.name)),
      marker: { color: sorted.map((p) => (p.below_noise ? "#c5cbd4" : COLORS.accent)) },
      text: sorted.map((p) => pct(p.importance) + (p.below_noise ? " (noise)" : "")), textposition: "outside",
      cliponaxis: false, hovertemplate: "%{y}: %{x:.1%}<extra></extra>",
    }], layout({
      showlegend: false,
      xaxis: axis({ tickformat: ".0%", range: [0, Math.min(1.15, Math.max(...sorted.map((p) => p.importance)) * 1.2)], title: { text: "share of the variance in samples/s" } }),
      yaxis: axis({ gridcolor: "rgba(0,0,0,0)", ticksuffix: "  " }),
      margin: { l: 150, r: 24, t: 8, b: 40 },
      bargap: 0.35,
      shapes: floor !== null ? [{ type: "line", x0: floor, x1: floor, y0: 0, y1: 1, yref: "paper",
        line: { color: COLORS.faint, dash: "dot", width: 1.5 } }] : [],
    }), `Parameter importance, share of the variance in samples/s: ${[...sorted].reverse()
      .map((p) => `${PARAM_LABELS[p.name] || p.name} ${pct(p.importance)}${p.below_noise ? " (noise)" : ""}`).join(", ")}`);
  }

  function renderMatrix(matrix, study) {
    const hasData = matrix && matrix.samples_per_s.some((row) => row.some(isNum));
    if (!hasData) {
      chartMessage("chart-matrix", ACTIVE.has(study.state) ? "No feasible measurement yet." : "No feasible measurement.");
      return;
    }
    const xs = matrix.batch_sizes.map((b) => fmtInt.format(b));
    const z = matrix.samples_per_s;
    const text = z.map((row, i) => row.map((v, j) => (isNum(v) ? fmtInt.format(v) : unmeasured(matrix, i, j))));
    const counts = matrix.trials.map((row, i) => row.map((_, j) => trialCounts(matrix, i, j)));
    // One value (a single cell, or all alike) has no scale: plotly spread 15,664 to 15,665 over five ticks.
    const values = new Set(z.flat().filter(isNum).map((v) => Math.round(v)));
    plot("chart-matrix", [{
      showscale: values.size > 1,
      type: "heatmap", x: xs, y: matrix.precisions.map(plain), z, text, customdata: counts,
      texttemplate: "%{text}", textfont: { size: 12 },
      colorscale: [[0, "#eef3fd"], [0.5, "#9db6ee"], [1, "#2f62d6"]], xgap: 3, ygap: 3,
      hovertemplate: "%{y} · batch %{x}<br>best %{z:,.0f} samples/s<br>%{customdata}<extra></extra>",
      colorbar: { thickness: 10, outlinewidth: 0, tickformat: ",.0f", tickfont: { size: 11, color: COLORS.muted },
        title: { text: "samples/s", side: "right", font: { size: 11, color: COLORS.muted } } },
    }], layout({
      xaxis: axis({ type: "category", gridcolor: "rgba(0,0,0,0)", side: "bottom", title: { text: "batch size" } }),
      yaxis: axis({ type: "category", gridcolor: "rgba(0,0,0,0)", autorange: "reversed", ticksuffix: "  ",
        title: { text: "precision fwd/bwd" } }),
      margin: { l: 84, r: 8, t: 8, b: 40 },
    }), matrixSummary(matrix));
  }

  function matrixSummary(matrix) {
    const cells = [];
    matrix.precisions.forEach((p, i) => matrix.batch_sizes.forEach((b, j) => {
      if (isNum(matrix.samples_per_s[i][j])) cells.push({ p, b, v: matrix.samples_per_s[i][j] });
    }));
    const best = cells.reduce((a, c) => (c.v > a.v ? c : a));
    return `Best feasible samples/s by precision and batch size: ${num0(cells.length)} of `
      + `${num0(matrix.precisions.length * matrix.batch_sizes.length)} cells measured, the fastest `
      + `${num0(best.v)} at ${best.p} batch ${num0(best.b)}`;
  }

  // A cell with no feasible measurement says why: "infeasible" is over the quantization-error limit,
  // "failed" is a trial that did not run to the end (fp8 not supported); a cell can have both.
  const CELL_STATES = ["infeasible", "failed"];
  const cellCount = (matrix, state, i, j) => ((matrix[state] || [])[i] || [])[j] || 0;
  // A cell no trial measured at all says so, not left blank.
  const unmeasured = (matrix, i, j) => CELL_STATES.filter((s) => cellCount(matrix, s, i, j)).join(" / ")
    || (matrix.trials[i][j] ? "no result" : "not tried");
  function trialCounts(matrix, i, j) {
    const some = CELL_STATES.filter((s) => cellCount(matrix, s, i, j)).map((s) => `${num0(cellCount(matrix, s, i, j))} ${s}`);
    return `${num0(matrix.trials[i][j])} trial(s)${some.length ? `: ${some.join(", ")}` : ""}`;
  }

  // ---------------------------------------------------------------- configs page

  const HISTORY_SHOWN = 20; // versions a card lists, newest first (the API pages the rest)

  function configsPage() {
    // The address this page was reached at: the one jobs reach too, where the service's own idea of
    // it (its Host header, behind a TLS proxy an internal http:// one) may not be.
    setText("hook-server", location.origin);
    let lastKey = null;
    let lastShown = null;
    let details = [];
    every(async () => {
      const served = await api("/v1/configs");
      const key = JSON.stringify(served);
      if (key !== lastKey) {
        // One card's trouble (a key answering 500) is said on that card; every other card is drawn.
        details = await Promise.all(served.map(async (c) => {
          const base = `/v1/configs/${encodeURIComponent(c.cluster)}/${encodeURIComponent(c.workload)}`;
          const [lines, history] = await Promise.all([
            settled(api(`${base}?format=env&nodes=${c.nodes}`, { text: true })),
            settled(api(`${base}/history?nodes=${c.nodes}&limit=${HISTORY_SHOWN}`)),
          ]);
          return { config: c, base, lines, history };
        }));
        lastKey = key;
      }
      // Staleness moves without a new version (jobs report another stack, time passes): read every time.
      const validations = await Promise.all(details.map((d) => settled(api(`${d.base}/validations?nodes=${d.config.nodes}`))
        .then((v) => (v.error ? null : v))));
      const shown = JSON.stringify([key, validations]);
      if (shown !== lastShown) {
        renderConfigs(details.map((d, i) => ({ ...d, validation: validations[i] })));
        lastShown = shown;
      }
      setLive(true, "live");
      return 10000;
    });
  }

  /** A request's answer, or {error} when it failed with an HTTP error (one card's trouble, not the page's). */
  function settled(request) {
    return request.catch((err) => {
      if (err instanceof HttpError) return { error: err.message };
      throw err;
    });
  }

  /** The stack a config was validated on: "NVIDIA H100 · driver 550.54.15 · NCCL 2.21.5 · 2 nodes". */
  function stackText(fp) {
    if (!fp) return "an unrecorded stack";
    const parts = [fp.gpu, fp.driver ? `driver ${fp.driver}` : null, fp.nccl ? `NCCL ${fp.nccl}` : null,
      fp.aws_ofi_nccl ? `aws-ofi-nccl ${fp.aws_ofi_nccl}` : null,
      fp.nodes ? `${fp.nodes} node${String(fp.nodes) === "1" ? "" : "s"}` : null];
    return parts.filter(Boolean).join(" · ") || "an unrecorded stack";
  }

  function validationSection(v) {
    const rows = v ? v.validations : [];
    return el("div", { class: "history revalidations" }, el("h3", {}, `Re-validations (${rows.length})`),
      rows.length ? el("div", { class: "table-scroll" }, el("table", { class: "data" },
        el("thead", {}, el("tr", {}, ...["Requested", "Version", "Trigger", "Result", "Speedup", "On", "What it did"].map(
          (h, i) => el("th", { class: i === 4 ? "num" : null }, h)))),
        el("tbody", {}, ...rows.map((r) => el("tr", { dataset: { validation: r.id } },
          el("td", { title: r.reason }, when(r.requested_at)),
          el("td", {}, r.version ? `v${r.version}` : "—"),
          el("td", {}, r.trigger),
          el("td", {}, el("span", { class: `badge s-${r.state === "held" ? "ok" : r.state}` }, r.state)),
          el("td", { class: "num" }, isNum(r.speedup) ? times(r.speedup) : "—",
            isNum(r.ci_low) ? el("span", { class: "ci" }, ` ${interval(r.ci_low, r.ci_high)}`) : null),
          el("td", {}, r.fingerprint ? stackText(r.fingerprint) : "—"),
          el("td", { title: r.why || r.error || "" }, r.action || r.error || r.reason)))))) :
        el("p", { class: "empty" }, "None yet: autotuner revalidate, the schedule, or jobs on another stack ask for one."));
  }

  function renderConfigs(details) {
    const root = $("configs");
    if (!details.length) {
      fill(root, el("p", { class: "empty" }, "Nothing published yet: a study publishes its config when it finishes."));
      return;
    }
    fill(root, ...details.map(({ config: c, lines, history, validation }) => {
      const ev = c.evidence || {};
      const hasCi = isNum(ev.ci_low) && isNum(ev.ci_high);
      // Served the baseline although a finalist was measured (its quality cost not ruled out, say).
      const keptFinalist = !hasCi && ev.speedup === 1 && ev.finalist && ev.finalist.candidate !== ev.candidate_id
        ? finalistText(ev.finalist) : null;
      const exportsText = typeof lines === "string" ? lines : `# the export lines could not be read (${lines.error})`;
      const pre = el("pre", {}, exportsText);
      const copy = el("button", { type: "button", class: "btn copy", title: "copy the export lines" }, "Copy");
      copy.addEventListener("click", () => copyText(exportsText, copy));
      const versions = Array.isArray(history) ? history : [];
      const claim = c.claim || {};
      const ladder = (claim.ladder || []).map((st) => st.line).join(" · ");
      const facts = [
        // An empty row says why, as the Speedup row does ("baseline kept"), not a bare dash.
        ["Ladder", ladder || ((ev.decision || "").endsWith(BASELINE_BEST) ? "none: no setting measured beat the baseline"
          : ev.speedup === 1 && !hasCi ? "none: the baseline itself was published" : "not measured")],
        ["Quality", claim.quality || "not measured"],
        ["Speedup", isNum(ev.speedup) ? el("span", {}, el("span", { class: ev.significant ? "gain" : "nogain" }, times(ev.speedup)),
          " ", el("span", { class: "ci" }, hasCi ? `${interval(ev.ci_low, ev.ci_high)} ${ciLevel(ev.confidence)}, ${ev.rounds} rounds`
            : keptFinalist ? `baseline kept · finalist ${keptFinalist} not published` : "not confirmed")) : "—"],
        ["Decision", ev.decision || "—"],
        ["Throughput", isNum(ev.tuned_samples_per_s) ? `${num0(ev.tuned_samples_per_s)} vs ${num0(ev.baseline_samples_per_s)} samples/s` : "not measured"],
        ["Precision", `${c.qcomms.forward_precision} fwd / ${c.qcomms.backward_precision} bwd`],
        ["Batch · sharding", `${num0(c.batch_size)}${isNum(c.lr_scale) ? ` (learning rate × ${num2(c.lr_scale)})` : ""} · ${c.sharding}${c.num_threads ? ` · ${c.num_threads} threads` : ""}`],
        ["NCCL env", Object.keys(c.env).length ? `${Object.keys(c.env).length} variable(s)` : "defaults (no overrides)"],
        ["Evidence", c.study_id ? el("span", {}, el("a", { href: `/studies/${c.study_id}` }, `study #${c.study_id}`),
          ev.measured_on ? ` · measured with ${ev.measured_on}` : "") : "—"],
        ["Cluster", fingerprint(c.fingerprint)],
        ["Validated", el("span", { class: "validated" }, `validated ${ago(c.validated_at) || "just now"} on ${stackText(c.validated_on)}`)],
      ];
      const stale = Object.entries((validation && validation.stale_reasons) || {}).map(([reason, why]) =>
        el("div", { class: "warn-note stale", dataset: { reason } }, `stale: ${why}`));
      return el("article", { class: "config-card", dataset: { key: `${c.cluster}/${c.workload}/${c.nodes}` } },
        el("header", {},
          el("h2", {}, `${c.cluster} / ${c.workload}`),
          el("span", { class: "tag" }, `${c.nodes} node${c.nodes === 1 ? "" : "s"}`),
          el("span", { class: "badge version" }, `v${c.version}`),
          c.pinned ? el("span", { class: "badge pinned", title: "served regardless of newer versions" }, "pinned") : null,
          el("span", { class: "when", title: utc(c.created_at) }, `published ${ago(c.created_at)} · ${when(c.created_at)}`)),
        el("div", { class: "config-body" },
          el("div", { class: "config-facts" },
            el("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
            ev.emulation ? el("div", { class: "warn-note" }, ev.emulation) : null, ...stale),
          el("div", { class: "config-exports" }, el("div", { class: "pre-wrap" }, pre, copy))),
        validationSection(validation),
        el("div", { class: "history" }, el("h3", {}, versions.length < HISTORY_SHOWN ? `Version history (${versions.length})` : `Version history (latest ${HISTORY_SHOWN})`),
          history.error ? el("div", { class: "warn-note" }, `history could not be read: ${history.error}`) : null,
          el("div", { class: "table-scroll" }, el("table", { class: "data" },
            el("thead", {}, el("tr", {}, ...["Version", "Published", "Speedup", "Precision", "Batch", "Study"].map(
              (h, i) => el("th", { class: [2, 4].includes(i) ? "num" : null }, h)))),
            el("tbody", {}, ...versions.map((h) => {
              const hev = h.evidence || {};
              if (h.error) {
                return el("tr", { class: "unreadable" }, el("td", {}, `v${h.version}`), el("td", {}, when(h.created_at)),
                  el("td", { colspan: "4" }, el("span", { class: "badge s-failed" }, "unreadable"), ` ${h.error}`));
              }
              // Which version is served sits beside its number: in a last column a phone scrolled it away.
              return el("tr", {},
                el("td", { class: "version-cell" }, `v${h.version}`,
                  h.version === c.version ? [" ", el("span", { class: "badge s-ok" }, "serving")] : null,
                  h.pinned ? [" ", el("span", { class: "badge pinned" }, "pinned")] : null,
                  h.flagged ? [" ", el("span", { class: "badge s-failed", title: h.flagged }, "re-validation failed")] : null),
                el("td", {}, when(h.created_at)),
                el("td", { class: "num" }, times(hev.speedup),
                  isNum(hev.ci_low) ? el("span", { class: "ci" }, ` ${interval(hev.ci_low, hev.ci_high)}`) : null),
                el("td", {}, `${h.qcomms.forward_precision}/${h.qcomms.backward_precision}`),
                el("td", { class: "num" }, num0(h.batch_size)),
                el("td", {}, h.study_id ? el("a", { href: `/studies/${h.study_id}` }, `#${h.study_id}`) : "—"));
            }))))));
    }));
  }

  function fingerprint(fp) {
    if (!fp || !Object.keys(fp).length) return "—";
    const v = fp.versions || {};
    const parts = [fp.device_name || fp.device, fp.backend, fp.world_size ? `world ${fp.world_size}` : null,
      fp.network, fp.efa ? "EFA" : null, v.nccl ? `NCCL ${v.nccl}` : null, fp.ofi_plugin ? `aws-ofi-nccl ${fp.ofi_plugin}` : null,
      v.torch ? `torch ${v.torch}` : null];
    return parts.filter(Boolean).join(" · ") || "—";
  }

  async function copyText(text, button) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (_) {
      // No clipboard API outside secure contexts (plain http on a cluster host): select and copy.
      const area = el("textarea", { readonly: true, style: "position:fixed;top:-1000px;opacity:0" });
      area.value = text;
      document.body.append(area);
      area.select();
      try { ok = document.execCommand("copy"); } catch (__) { ok = false; }
      area.remove();
    }
    button.textContent = ok ? "Copied" : "Select & copy";
    button.classList.toggle("done", ok);
    setTimeout(() => { button.textContent = "Copy"; button.classList.remove("done"); }, 1800);
  }

  // ---------------------------------------------------------------- start

  setupTokenForm();
  const start = { studies: studiesPage, study: studyPage, configs: configsPage }[document.body.dataset.page];
  if (start) start();
})();
