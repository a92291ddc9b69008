"use strict";
// The run report page of swarm (docs/USAGE.md, "The report page"). Everything shown comes
// from the JSON above, put into the page as text only (never as HTML): file names, errors
// and output are a worker's words.
(() => {
  const D = JSON.parse(document.getElementById("data").textContent);
  const R = D.report, X = D.extra, T = R.tasks;
  const PAGE = 200;
  const $ = (id) => document.getElementById(id);
  const COLORS = {};
  const css = getComputedStyle(document.documentElement);
  const color = (s) => COLORS[s] || (COLORS[s] = css.getPropertyValue("--" + s).trim() || "#78909c");
  const WORDS = { no_change: "no change", done: "finished, not merged", pending: "not started", running: "running" };
  const word = (s) => WORDS[s] || s;

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "class") e.className = v;
      else if (k === "style") e.style.cssText = v;
      else if (k.startsWith("data-") || k.startsWith("aria-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid instanceof Node ? kid : String(kid));
    return e;
  }
  const short = (oid) => (oid ? oid.slice(0, 10) : "none");
  function secs(ms) {
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + "s";
    const m = Math.floor(s / 60);
    return m < 60 ? m + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s" : Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }
  const tokens = (t) => (t ? t.prompt + t.completion : 0);
  function spend(t) {
    if (t.cost_usd) return "$" + t.cost_usd.toFixed(t.cost_usd < 1 ? 4 : 2);
    const n = tokens(t.tokens);
    return n ? n.toLocaleString("en") + " tok" : "";
  }
  const badge = (s) => el("span", { class: "badge", style: "background:" + color(s) }, word(s));

  // The header: what ran, where, how it ended, what it cost.
  function header() {
    const head = $("head"), t = R.totals;
    head.replaceChildren(el("h1", {}, "swarm run ", el("span", { class: "mono" }, R.run_id)));
    head.append(el("pre", { class: "instruction" }, R.instruction));
    const facts = el("dl", { class: "facts" });
    const fact = (k, ...v) => facts.append(el("dt", {}, k), el("dd", {}, ...v));
    fact("state", R.state);
    fact("base", el("code", {}, short(R.base)));
    fact("target", el("code", {}, R.into), R.into_updated ? " (moved to the result)" : " (not moved)");
    fact("result", el("code", {}, short(R.result)), R.result_branch ? " on " + R.result_branch : "");
    fact("tasks", t.tasks + ": " + describe(t));
    fact("duration", secs(t.duration_ms) + " (started " + R.started_at + ")");
    const spent = [];
    if (tokens(t.tokens)) spent.push(tokens(t.tokens).toLocaleString("en") + " tokens");
    if (t.cost_usd) spent.push("$" + t.cost_usd.toFixed(2));
    if (t.requests) spent.push(t.requests + " model answers");
    fact("spend (metered)", spent.length ? spent.join(", ") : "nothing metered");
    if (R.verify_merged) {
      const v = R.verify_merged;
      fact("--verify-merged", el("code", {}, v.command), v.passed ? " passed" : " did not pass", v.problem ? ": " + v.problem : "");
    }
    if (R.merge_hint) fact("to merge by hand", el("pre", {}, R.merge_hint));
    head.append(facts);
    $("foot").textContent = "swarm " + X.swarm + ", page made " + X.generated_at + " from report.json and events.jsonl";
  }
  function describe(t) {
    const parts = [t.merged + " merged", t.no_change + " no change"];
    for (const [k, w] of [["failed", "failed"], ["conflict", "conflict"], ["timeout", "timeout"], ["excluded", "excluded"], ["skipped", "skipped"], ["interrupted", "interrupted"], ["unfinished", "not finished"], ["unmerged", "finished, not merged"]]) if (t[k]) parts.push(t[k] + " " + w);
    return parts.join(", ");
  }

  // The chips: how many tasks ended each way; each one filters the table.
  const counts = {};
  for (const task of T) counts[task.status] = (counts[task.status] || 0) + 1;
  const statuses = Object.keys(counts).sort((a, b) => counts[b] - counts[a]);
  function chips() {
    const nav = $("counts");
    nav.replaceChildren();
    for (const s of statuses) {
      nav.append(el("button", { type: "button", class: "chip", "data-status": s, "aria-pressed": String(state.status === s), onclick: () => go({ status: state.status === s ? "" : s, group: "" }) },
        el("span", { class: "dot", style: "background:" + color(s) }), counts[s] + " " + word(s)));
    }
    const sel = $("outcome");
    sel.replaceChildren(el("option", { value: "" }, "all (" + T.length + ")"));
    for (const s of statuses) sel.append(el("option", { value: s }, word(s) + " (" + counts[s] + ")"));
  }

  // The timeline: each attempt a bar on its worker slot, coloured by how it ended.
  const TL = X.timeline;
  function timeline() {
    const canvas = $("timeline"), box = $("timeline-box");
    if (!TL.segments.length) {
      $("time-note").textContent = "No timeline: the run has no event log.";
      canvas.hidden = true;
      return;
    }
    const width = Math.max(box.clientWidth - 2, 600);
    const row = TL.slots > 64 ? 3 : TL.slots > 24 ? 6 : 14;
    const height = TL.slots * row + 18;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = width * ratio; canvas.height = height * ratio;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    const span = Math.max(TL.span_ms, 1), x = (ms) => (ms / span) * width;
    g.fillStyle = "#777"; g.font = "11px system-ui, sans-serif";
    for (let i = 0; i <= 4; i++) g.fillText(secs((span * i) / 4), Math.min(x((span * i) / 4), width - 40), height - 4);
    // An attempt that finished with a change ended as its task did (merged, a conflict…).
    const ended = (s) => (s.status === "done" && T[s.task].status !== "running" ? T[s.task].status : s.status);
    for (const s of TL.segments) {
      const bx = x(s.start_ms), bw = Math.max(x(s.end_ms) - bx, 1), by = s.slot * row;
      g.fillStyle = color(ended(s));
      g.fillRect(bx, by + 1, bw, row - 2);
      if (s.attempt > 1 || s.candidate > 0) {
        g.strokeStyle = "#000"; g.lineWidth = 1;
        g.strokeRect(bx + 0.5, by + 1.5, Math.max(bw - 1, 0.5), row - 3);
      }
    }
    const busy = TL.segments.reduce((a, s) => a + (s.end_ms - s.start_ms), 0);
    $("time-note").textContent = TL.segments.length + " attempt(s) over " + secs(TL.span_ms) + ", at most " + TL.slots + " at once (a row each)" +
      "; the rows were busy " + Math.round((100 * busy) / (span * TL.slots)) + "% of it. A bar with a black edge is a retry or a candidate. Click a bar to open its task.";
    const hit = (ev) => {
      const r = canvas.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
      const slot = Math.floor(my / row), ms = (mx / width) * span;
      return TL.segments.find((s) => s.slot === slot && s.start_ms <= ms && ms <= Math.max(s.end_ms, s.start_ms + span / width));
    };
    const tip = $("tip");
    canvas.onmousemove = (ev) => {
      const s = hit(ev);
      tip.hidden = !s;
      if (!s) return;
      const task = T[s.task];
      tip.textContent = task.id + " · " + word(ended(s)) + " · " + secs(s.end_ms - s.start_ms) + (s.attempt > 1 ? " · attempt " + s.attempt : "") + (s.candidate ? " · candidate " + s.candidate : "");
      tip.style.left = ev.offsetX + 12 + "px"; tip.style.top = ev.offsetY + 12 + "px";
    };
    canvas.onmouseleave = () => (tip.hidden = true);
    canvas.onclick = (ev) => { const s = hit(ev); if (s) go({ task: T[s.task].id, status: "", group: "", q: "" }); };
    $("legend").replaceChildren(...statuses.map((s) => el("span", {}, el("span", { class: "dot", style: "background:" + color(s) }), word(s))));
  }

  // The failures, grouped by why, each with its next step.
  function failureGroups() {
    if (!X.groups.length) return;
    $("failures").hidden = false;
    const list = $("groups");
    X.groups.forEach((grp, i) => {
      list.append(el("li", { "data-group": String(i) },
        badge(grp.status), " ", el("strong", {}, grp.tasks.length + " task(s)"), ": ", grp.files, " ",
        el("button", { type: "button", onclick: () => go({ group: String(i), status: "", q: "" }) }, "show them"),
        el("pre", { class: "reason" }, grp.reason),
        tail(T[grp.tasks[0]].output_tail),
        el("div", {}, "next: ", el("code", {}, grp.next))));
    });
  }

  // The last lines a group's first task printed, as the terminal summary shows them.
  function tail(output) {
    if (!output) return null;
    const lines = output.trimEnd().split("\n");
    return el("pre", { class: "output" }, lines.slice(-5).join("\n"));
  }

  // The table: filtered by outcome, group and path, sorted, shown PAGE rows at a time.
  const state = { status: "", q: "", sort: "plan", group: "", task: "", limit: PAGE };
  const haystack = T.map((t) => (t.id + "\n" + t.files.join("\n") + "\n" + (t.changed_files || []).join("\n")).toLowerCase());
  function selected() {
    let idx = T.map((_, i) => i);
    if (state.group !== "" && X.groups[state.group]) idx = X.groups[state.group].tasks.slice();
    if (state.status) idx = idx.filter((i) => T[i].status === state.status);
    const q = state.q.trim().toLowerCase();
    if (q) idx = idx.filter((i) => haystack[i].includes(q));
    const cost = (t) => t.cost_usd * 1e9 + tokens(t.tokens);
    if (state.sort === "time") idx.sort((a, b) => T[b].duration_ms - T[a].duration_ms || a - b);
    else if (state.sort === "spend") idx.sort((a, b) => cost(T[b]) - cost(T[a]) || a - b);
    else idx.sort((a, b) => a - b);
    return idx;
  }
  function table() {
    const idx = selected();
    if (state.task) {
      const at = idx.findIndex((i) => T[i].id === state.task);
      if (at >= state.limit) state.limit = at + 1;
    }
    const rows = $("rows");
    rows.replaceChildren();
    for (const i of idx.slice(0, state.limit)) rows.append(row(i));
    const what = [];
    if (state.group !== "" && X.groups[state.group]) what.push("group " + (Number(state.group) + 1));
    if (state.status) what.push(word(state.status));
    if (state.q) what.push("matching \u201c" + state.q + "\u201d");
    const shown = Math.min(idx.length, state.limit);
    $("shown").textContent = "showing " + shown + " of " + idx.length + " task(s)" + (what.length ? " (" + what.join(", ") + ")" : "") + (idx.length < T.length ? "; " + T.length + " in the run" : "");
    $("shown").dataset.matching = String(idx.length);
    const more = $("more");
    more.hidden = idx.length <= state.limit;
    more.textContent = "show " + Math.min(PAGE, idx.length - state.limit) + " more";
    $("outcome").value = state.status; $("search").value = state.q; $("sort").value = state.sort;
    for (const chip of document.querySelectorAll(".chip")) chip.setAttribute("aria-pressed", String(chip.dataset.status === state.status));
    if (state.task) {
      const open = rows.querySelector("tr.open");
      if (open) open.scrollIntoView({ block: "start" });
    }
  }
  function row(i) {
    const t = T[i], d = X.diffs[i];
    const files = t.files.length > 3 ? t.files.slice(0, 3).join(", ") + " and " + (t.files.length - 3) + " more" : t.files.join(", ");
    const change = d ? d.stat.trim().split("\n").pop().trim() : t.changed_files.length ? t.changed_files.length + " file(s)" : "";
    const tr = el("tr", { class: "task", "data-task": t.id, "data-status": t.status, onclick: () => go({ task: state.task === t.id ? "" : t.id }) },
      el("td", { class: "mono" }, t.id), el("td", { class: "files mono" }, files), el("td", {}, badge(t.status)),
      el("td", { class: "num" }, t.candidates && t.candidates.length ? t.candidates.length + " cand." : String(t.attempts)),
      el("td", { class: "num" }, secs(t.duration_ms)), el("td", { class: "num" }, spend(t)), el("td", {}, change));
    if (state.task !== t.id) return tr;
    tr.classList.add("open");
    const frag = document.createDocumentFragment();
    frag.append(tr, el("tr", { class: "detail", "data-detail": t.id }, el("td", { colSpan: 7 }, detail(t, d))));
    return frag;
  }
  function detail(t, d) {
    const box = el("div", { class: "detail" });
    const part = (title, ...kids) => box.append(el("h3", {}, title), ...kids);
    part("Files", el("pre", {}, t.files.join("\n")));
    if (t.error) part("Why it did not merge", el("pre", { class: "error" }, t.error));
    if (t.hint) part("Hint", el("pre", {}, t.hint));
    if (t.ran_alone) part("Why it ran alone", el("pre", {}, t.ran_alone));
    if (t.selection) part("Candidates", el("pre", {}, "chose c" + t.selection.winner + " by " + t.selection.by + "\n" + t.selection.steps.join("\n")));
    for (const c of t.candidates || []) box.append(el("div", { class: "mono" }, "c" + c.number + ": " + word(c.status) + (c.worker ? " (" + c.worker + ")" : "") + (c.error ? ": " + c.error : "")));
    const checks = [];
    if (t.log) checks.push("log: " + t.log);
    if (R.verify_merged && R.verify_merged.excluded.includes(t.id)) checks.push("left out: it breaks --verify-merged (" + R.verify_merged.command + ")");
    for (const m of t.merge_drivers || []) checks.push("merge driver " + m.driver + (m.merged ? " merged " : " did not merge ") + m.path + (m.error ? ": " + m.error : ""));
    if (t.rerun_spared) checks.push("its conflict was merged by a driver: a re-run spared");
    if (t.network && (t.network.allowed || t.network.refused)) checks.push("network: " + t.network.allowed + " allowed, " + t.network.refused + " refused" + (t.network.refused_hosts.length ? " (" + t.network.refused_hosts.join(", ") + ")" : ""));
    if (t.summary) checks.push("worker's summary: " + t.summary);
    if (checks.length) part("Checks and records", el("pre", {}, checks.join("\n")));
    if (t.output_tail) part("Worker output (last lines)", el("pre", { class: "output" }, t.output_tail));
    if (d) {
      part("Change", el("pre", {}, d.stat));
      if (d.patch !== null) box.append(diffView(d.patch));
      if (d.cut) box.append(el("p", { class: "note" }, "The diff is cut here; the whole of it: ", el("code", {}, "swarm diff " + R.run_id + " " + t.id)));
    }
    box.append(el("p", { class: "note mono" }, "branch " + t.branch + (t.branch_kept ? " (kept)" : "") + ", commit " + short(t.commit) + ", merge " + short(t.merge_commit)));
    return box;
  }
  function diffView(patch) {
    const pre = el("pre", { class: "diff" });
    let head = false;
    for (const line of patch.split("\n")) {
      if (line.startsWith("diff --git ")) head = true;
      else if (line.startsWith("@@")) head = false;
      const cls = head ? "head" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      pre.append(el("span", cls ? { class: cls } : {}, line || " "));
    }
    return pre;
  }

  // The land groups, with owners and where each request stands.
  function land() {
    if (!X.land) return;
    $("land").hidden = false;
    const rec = X.land.record, stages = X.land.stages, n = {};
    for (const s of stages) n[s] = (n[s] || 0) + 1;
    $("burndown").textContent = rec.groups.length + " group(s) by " + rec.by + ": " + Object.entries(n).map(([s, c]) => c + " " + s).join(", ");
    const rows = $("land-rows");
    rec.groups.forEach((grp, i) => {
      const req = grp.request;
      // A forge's answer is not trusted to name a page to open: only http(s) becomes a link.
      const link = req && /^https?:\/\//i.test(req.url) ? el("a", { href: req.url, rel: "noreferrer noopener" }, "#" + req.number) : req ? "#" + req.number : "";
      rows.append(el("tr", {}, el("td", { class: "mono" }, grp.name), el("td", {}, grp.owners.join(", ")), el("td", { class: "num" }, String(grp.tasks.length)),
        el("td", {}, stages[i]), el("td", {}, link, req ? " " + req.state : ""), el("td", {}, grp.check ? (grp.check.passed ? "passed" : "failed") : ""), el("td", {}, grp.problem || "")));
    });
  }

  // The page's state lives in its address (#status=failed&q=src/), so a view can be linked.
  function fromHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    state.status = p.get("status") || ""; state.q = p.get("q") || ""; state.sort = p.get("sort") || "plan";
    state.group = p.get("group") || ""; state.task = p.get("task") || ""; state.limit = PAGE;
  }
  function go(change) {
    Object.assign(state, change);
    const p = new URLSearchParams();
    for (const k of ["status", "q", "sort", "group", "task"]) if (state[k] && !(k === "sort" && state[k] === "plan")) p.set(k, state[k]);
    history.replaceState(null, "", "#" + p.toString());
    table();
  }

  header(); chips(); failureGroups(); land();
  fromHash(); table(); timeline();
  window.addEventListener("hashchange", () => { fromHash(); table(); });
  $("outcome").onchange = (e) => go({ status: e.target.value, limit: PAGE });
  $("search").oninput = (e) => go({ q: e.target.value, limit: PAGE });
  $("sort").onchange = (e) => go({ sort: e.target.value });
  $("clear").onclick = () => go({ status: "", q: "", group: "", task: "", sort: "plan", limit: PAGE });
  $("more").onclick = () => { state.limit += PAGE; table(); };
  window.addEventListener("resize", timeline);
  document.body.dataset.ready = String(Math.round(performance.now()));
})();
