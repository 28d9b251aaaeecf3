// The Holdfast console: a hash-routed page over the /v1 API. The API key
// lives in sessionStorage only and goes out only as an Authorization header.
import { el, folded, json, markdown, maskSecrets } from "./render.js";
import { streamEvents } from "./sse.js";

const KEY = "holdfast.api_key";
const main = document.getElementById("main");
let stopCurrent = () => {};

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, headers = {}) {
  const key = sessionStorage.getItem(KEY);
  const init = { method, headers: { Authorization: `Bearer ${key}`, ...headers }, cache: "no-store" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = init.headers["Content-Type"] ?? "application/json";
  }
  const response = await fetch(path, init);
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok) {
    if (response.status === 401 && path === "/v1/project") sessionStorage.removeItem(KEY);
    throw new ApiError(response.status, parsed);
  }
  return parsed;
}

// Each route() is one navigation; a page that finishes loading after a newer
// navigation began must not replace what that one shows.
let navigation = 0;

function show(...nodes) {
  stopCurrent();
  stopCurrent = () => {};
  main.replaceChildren(...nodes.filter((node) => node !== null && node !== undefined));
}

// A page's show(): false (showing nothing) once a newer navigation began.
function showFor(mine) {
  return (...nodes) => {
    if (mine !== navigation) return false;
    show(...nodes);
    return true;
  };
}

function errorLine(error) {
  return el("p", { class: "error", role: "alert" }, error.message);
}

// ---- sign in ---------------------------------------------------------------

function signIn(message) {
  document.getElementById("nav").hidden = true;
  const input = el("input", { id: "api-key", type: "password", autocomplete: "off", required: true, "aria-label": "API key" });
  const status = el("p", { role: "status" }, message ?? "");
  const form = el("form", { class: "signin", onsubmit: async (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    try { await loadProject(); route(); }
    catch (error) { sessionStorage.removeItem(KEY); status.replaceChildren(errorLine(error)); }
  } },
    el("h1", {}, "Sign in"),
    el("label", { for: "api-key" }, "API key (kept for this browser tab only)"),
    input, " ", el("button", { class: "primary", type: "submit", id: "sign-in" }, "Sign in"), status);
  show(form);
  input.focus();
}

async function loadProject() {
  const project = await api("GET", "/v1/project");
  document.getElementById("project-name").textContent = `Project: ${project.name}`;
  document.getElementById("nav").hidden = false;
  return project;
}

// ---- tables ----------------------------------------------------------------

// Each cell carries its column's name: on a phone a row shows as a card of
// labelled lines (style.css) instead of a table wider than the screen.
function table(id, headers, rows) {
  return el("div", { class: "table-wrap" }, el("table", { id },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c, i) => el("td", { "data-label": headers[i] }, c)))))));
}

const link = (id) => el("a", { href: `#/agents/${id}` }, id);
const when = (t) => (t ? new Date(t).toLocaleString() : "—");

// ---- agents ----------------------------------------------------------------

function counts(byState) {
  return el("div", { class: "counts", id: "counts" },
    Object.entries(byState).map(([state, n]) => el("span", { class: "count", "data-state": state }, `${state}: ${n}`)));
}

async function agentsPage(params, render) {
  const project = await loadProject();
  const state = params.get("state") ?? "";
  const q = params.get("q") ?? "";
  const query = new URLSearchParams({ order: "activity", limit: params.get("limit") ?? "50" });
  if (state) query.set("state", state);
  if (q) query.set("q", q);
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  const list = await api("GET", `/v1/agents?${query}`);
  const stateSelect = el("select", { id: "state-filter", "aria-label": "State" },
    ["", "idle", "ready", "running", "waiting", "archived"].map((s) =>
      el("option", { value: s, selected: s === state }, s || "any state")));
  const search = el("input", { id: "search", type: "search", value: q, placeholder: "id, key=value or text", "aria-label": "Search" });
  const filter = el("form", { class: "toolbar", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (stateSelect.value) next.set("state", stateSelect.value);
    if (search.value.trim()) next.set("q", search.value.trim());
    location.hash = `#/agents?${next}`;
  } }, stateSelect, search, el("button", { type: "submit", id: "apply-filter" }, "Filter"));
  const rows = list.agents.map((agent) => [
    link(agent.id),
    agent.state,
    agent.config?.model?.name ?? "",
    JSON.stringify(agent.config?.metadata ?? {}),
    // The time the list is ordered by (latest event, else creation).
    el("time", { datetime: agent.activity_at }, when(agent.activity_at)),
  ]);
  const pager = el("div", { class: "toolbar" });
  if (list.has_more) {
    const next = new URLSearchParams(params);
    next.set("cursor", list.next_cursor);
    pager.append(el("a", { href: `#/agents?${next}`, id: "next-page" }, "Next page →"));
  }
  if (params.get("cursor")) {
    const first = new URLSearchParams(params);
    first.delete("cursor");
    pager.append(el("a", { href: `#/agents?${first}`, id: "first-page" }, "← First page"));
  }
  render(el("h1", {}, "Agents"), counts(project.agents_by_state), filter,
    table("agents", ["Agent", "State", "Model", "Metadata", "Last activity"], rows),
    rows.length === 0 ? el("p", { id: "no-agents" }, "No agents match.") : null, pager);
}

// ---- one agent -------------------------------------------------------------

function eventCard(event) {
  const d = event.data ?? {};
  const card = el("article", { class: `card event ${event.type.replace(/\./g, "-")}`, "data-seq": event.seq, "data-type": event.type },
    el("h3", {}, event.type), el("div", { class: "meta" }, `#${event.seq} · ${new Date(event.created_at).toLocaleString()}`));
  switch (event.type) {
    case "input.received": {
      const content = d.content;
      card.append(typeof content === "string" ? el("p", {}, content) : json(content));
      break;
    }
    case "model.response": {
      for (const block of d.message ?? []) {
        if (block.type === "text") card.append(el("div", { class: "model-text" }, markdown(block.text ?? "")));
        else if (block.type === "tool_use") card.append(folded(`tool call ${block.name}`, block.input));
      }
      if (d.usage) card.append(folded("usage", d.usage));
      break;
    }
    case "tool_call.created": card.append(folded(`${d.name} (${d.kind}) input`, d.input)); break;
    case "tool_call.completed":
      card.append(el("p", {}, `${d.name}${d.is_error ? " — error" : ""}`),
        // A large output is only previewed in its event; the tool call has it whole.
        d.output_omitted ? folded(`output (first of ${d.output_bytes} bytes)`, d.output_preview) : folded("output", d.output));
      break;
    case "model.retry": card.append(el("p", {}, `attempt ${d.attempt}, retrying in ${d.delay_ms} ms: ${d.error?.message ?? JSON.stringify(d.error)}`)); break;
    case "approval.requested":
      if (d.kind === "budget") card.append(el("p", {}, `continue past ${d.budget.budget}?`), folded("budget", d.budget));
      else card.append(el("p", {}, `approve ${d.name}?`), folded("input", d.input));
      break;
    case "approval.answered": card.append(el("p", {}, `${d.decision} by ${d.by}${d.reason ? `: ${d.reason}` : ""}`)); break;
    case "question.asked": card.append(el("p", {}, d.question)); break;
    case "question.answered": card.append(el("p", {}, `${d.answer ?? ""} (${d.by ?? ""})`)); break;
    case "subagent.started": case "subagent.finished":
      if (d.child_agent_id) card.append(el("a", { href: `#/agents/${d.child_agent_id}` }, `subagent ${d.child_agent_id}`));
      card.append(folded("details", d));
      break;
    case "turn.failed": card.classList.add("failed"); card.append(el("p", { class: "error" }, `${d.error?.type}: ${d.error?.message}`)); break;
    case "config.updated": card.append(folded("config", maskSecrets(d.config))); break;
    default: if (Object.keys(d).length) card.append(folded("data", d));
  }
  return card;
}

function pendingForms(agentId, refresh) {
  const box = el("section", { id: "pending", "aria-label": "Waiting for you" });
  // The outcome of the last answer lives outside the forms: an answer (ours
  // or someone else's) ends the wait, the forms are rebuilt without it, and
  // the outcome must stay readable.
  const notice = el("p", { id: "answer-notice", role: "status" });
  const answerBy = el("input", { id: "answer-by", value: "console" });
  const heading = [el("h2", {}, "Waiting for you"), el("label", {}, "Answer as ", answerBy)];
  const by = () => answerBy.value || "console";
  // The forms shown, by what they answer: a reload keeps a form that is
  // still pending (and what was typed into it), adds new ones, drops the rest.
  let shown = new Map();
  async function submit(what, action) {
    notice.replaceChildren();
    try { await action(); notice.replaceChildren(el("span", { class: "notice" }, `${what}: sent`)); refresh(); }
    catch (error) {
      if (error.status === 409) {
        const current = error.body?.approval ?? error.body?.question ?? error.body?.tool_call;
        const winner = current ? (current.decided_by ? `${current.status} by ${current.decided_by}` : current.answered_by ? `"${current.answer}" by ${current.answered_by}` : JSON.stringify(current.output ?? current.status)) : error.message;
        notice.replaceChildren(el("span", { class: "error conflict", role: "alert" }, `${what}: already answered: ${winner}`));
        refresh();
      } else notice.replaceChildren(errorLine(error));
    }
  }
  function approvalForm(approval) {
    const reason = el("input", { "aria-label": "Reason", placeholder: "reason (optional)" });
    // A budget approval asks whether the turn may go past a reached budget.
    const budget = approval.kind === "budget" ? approval.budget : null;
    const what = budget ? `budget ${budget.budget}` : approval.tool_name;
    const decide = (decision) => submit(`${decision} ${what}`, () => api("POST", `/v1/approvals/${approval.id}`, { decision, by: by(), reason: reason.value || undefined }));
    return el("form", { class: "approval", "data-id": approval.id, onsubmit: (e) => e.preventDefault() },
      el("h3", {}, budget ? `Continue past ${budget.budget} (${budget.value} of ${budget.limit})?` : `Approve ${approval.tool_name}?`),
      budget ? json(budget) : json(approval.tool_input), reason,
      el("button", { type: "button", class: "primary approve", onclick: () => decide("approve") }, "Approve"), " ",
      el("button", { type: "button", class: "deny", onclick: () => decide("deny") }, "Deny"));
  }
  function questionForm(question) {
    const answer = el("input", { class: "answer", "aria-label": "Answer", required: true });
    return el("form", { class: "question", "data-id": question.id, onsubmit: (e) => { e.preventDefault(); submit("answer", () => api("POST", `/v1/questions/${question.id}/answer`, { answer: answer.value, by: by() })); } },
      el("h3", {}, question.question), answer, " ", el("button", { type: "submit" }, "Answer"));
  }
  function toolCallForm(call) {
    const output = el("textarea", { class: "tool-output", "aria-label": "Result (JSON)" }, "{}");
    return el("form", { class: "tool-call", "data-id": call.id, onsubmit: (e) => {
      e.preventDefault();
      let value;
      try { value = JSON.parse(output.value); } catch { notice.replaceChildren(el("span", { class: "error", role: "alert" }, `result for ${call.name}: the result must be JSON`)); return; }
      submit(`result for ${call.name}`, () => api("POST", `/v1/tool-calls/${call.id}/result`, { output: value }));
    } }, el("h3", {}, `Result for ${call.name}`), json(call.input), output, el("button", { type: "submit" }, "Send result"));
  }
  // Each event starts a reload, and an earlier one may finish last: only
  // the latest started reads what is pending now.
  let loads = 0;
  async function load() {
    const mine = ++loads;
    const [approvals, questions, calls] = await Promise.all([
      api("GET", `/v1/agents/${agentId}/approvals?status=pending`),
      api("GET", `/v1/agents/${agentId}/questions?status=pending`),
      api("GET", `/v1/agents/${agentId}/tool-calls?status=waiting`).catch(() => ({ tool_calls: [] })),
    ]);
    if (mine !== loads) return;
    const pending = [
      ...approvals.approvals.map((a) => [`approval:${a.id}`, () => approvalForm(a)]),
      ...questions.questions.map((q) => [`question:${q.id}`, () => questionForm(q)]),
      ...calls.tool_calls.filter((c) => c.kind === "custom").map((c) => [`tool-call:${c.id}`, () => toolCallForm(c)]),
    ];
    const unchanged = pending.length === shown.size && pending.every(([key]) => shown.has(key));
    if (unchanged && box.contains(notice)) return; // no move, so focus stays where the user typed
    const next = new Map(pending.map(([key, build]) => [key, shown.get(key) ?? build()]));
    shown = next;
    box.replaceChildren(notice, ...(next.size ? [...heading, ...next.values()] : []));
  }
  return { box, load };
}

async function agentPage(id, render) {
  await loadProject();
  let agent = await api("GET", `/v1/agents/${id}`);
  const stateLine = el("p", { id: "agent-state" });
  const setAgent = (a) => { agent = a; stateLine.textContent = `state: ${a.state}${a.turn_open ? " · turn open" : ""}`; };
  setAgent(agent);
  const configView = el("div", { id: "config" }, folded("config", maskSecrets(agent.config)));
  const timeline = el("section", { id: "timeline", "aria-label": "Timeline", "aria-live": "polite" });
  const live = el("article", { class: "card live", id: "live-text", hidden: true }, el("h3", {}, "model (streaming)"), el("p", { class: "delta-text" }));
  const streamStatus = el("span", { id: "stream-status", class: "meta" });
  const pending = pendingForms(id, () => { pending.load().catch(() => {}); });

  // As with the pending forms: a slower earlier read must not show a state
  // older than a later one did.
  let refreshes = 0;
  const refreshAgent = () => {
    const mine = ++refreshes;
    return api("GET", `/v1/agents/${id}`).then((a) => { if (mine === refreshes) setAgent(a); }).catch(() => {});
  };
  // The worker publishes deltas apart from the commit that saves the
  // response, so a call's last deltas can arrive after its model.response,
  // even after its turn ended. They show only while a turn is open (the
  // stream replays from seq 0, so its events tell), and never for a call
  // (lease epoch) whose response or retry has been saved.
  let turnOpen = false, liveEpoch = null, savedEpoch = -1;
  const stream = streamEvents({
    url: `/v1/agents/${id}/stream`, key: sessionStorage.getItem(KEY), afterSeq: 0,
    onStatus: (s) => { streamStatus.textContent = `stream: ${s}`; },
    onDelta: (delta) => {
      if (!turnOpen || delta.epoch <= savedEpoch) return;
      const text = live.querySelector(".delta-text");
      if (delta.epoch !== liveEpoch) { liveEpoch = delta.epoch; text.textContent = ""; }
      live.hidden = false;
      text.textContent += delta.text ?? "";
    },
    onEvent: (event) => {
      if (event.type === "turn.started") turnOpen = true;
      else if (/^turn\.(completed|failed|cancelled)$/.test(event.type)) turnOpen = false;
      if (event.type === "model.response" || event.type === "model.retry" || event.type.startsWith("turn.")) {
        if (liveEpoch !== null) savedEpoch = Math.max(savedEpoch, liveEpoch);
        live.hidden = true; live.querySelector(".delta-text").textContent = "";
      }
      timeline.append(eventCard(event));
      if (/^(approval|question|tool_call|turn)\./.test(event.type)) pending.load().catch(() => {});
      refreshAgent();
    },
  });

  const inputText = el("textarea", { id: "input-text", "aria-label": "Message", required: true });
  // The steering mode (docs/api.md): steer joins the turn, queue waits for
  // it to end, interrupt aborts the model call in flight.
  const inputMode = el("select", { id: "input-mode", "aria-label": "Mode" },
    ...["steer", "queue", "interrupt"].map((mode) => el("option", { value: mode }, mode)));
  const inputStatus = el("p", { role: "status", id: "input-status" });
  // One Idempotency-Key per message: a double click, or a resend after a
  // failure whose request did land, repeats the key and the API saves the
  // input once. A different text is a new message with a new key.
  let draft = null;
  const sendForm = el("form", { id: "send-input", onsubmit: async (e) => {
    e.preventDefault();
    const content = inputText.value;
    const mode = inputMode.value;
    if (draft?.content !== content || draft?.mode !== mode) draft = { content, mode, key: crypto.randomUUID() };
    const sending = draft;
    try {
      await api("POST", `/v1/agents/${id}/inputs`, { content, mode }, { "Idempotency-Key": sending.key });
      if (draft === sending) { draft = null; inputText.value = ""; }
      inputStatus.replaceChildren(el("span", { class: "notice" }, "sent"));
    } catch (error) { inputStatus.replaceChildren(errorLine(error)); }
  } }, el("h3", {}, "Send an input"), inputText, inputMode, el("button", { type: "submit", class: "primary", id: "send" }, "Send"), inputStatus);

  const patchText = el("textarea", { id: "config-patch", "aria-label": "Config merge patch", "aria-describedby": "config-error" }, "{}");
  const patchStatus = el("p", { role: "status" });
  // A refused patch (400, 422) names the config field at fault: it is shown
  // by that name right under the patch, which is marked invalid, until the
  // next attempt.
  const fieldError = el("p", { id: "config-error", class: "field-error", role: "alert", hidden: true });
  const refuse = (field, message) => {
    patchText.setAttribute("aria-invalid", "true");
    fieldError.dataset.field = field ?? "";
    fieldError.replaceChildren(...(field ? [el("code", { class: "field" }, field), " "] : []), message);
    fieldError.hidden = false;
  };
  const patchForm = el("form", { id: "edit-config", onsubmit: async (e) => {
    e.preventDefault();
    patchText.removeAttribute("aria-invalid");
    fieldError.hidden = true;
    patchStatus.replaceChildren();
    let patch;
    try { patch = JSON.parse(patchText.value); } catch { refuse(null, "the patch must be JSON"); return; }
    try {
      const updated = await api("PATCH", `/v1/agents/${id}`, patch, { "Content-Type": "application/merge-patch+json" });
      setAgent(updated); configView.replaceChildren(folded("config", maskSecrets(updated.config)));
      patchStatus.replaceChildren(el("span", { class: "notice" }, "saved"));
    } catch (error) {
      if (error.body?.error?.field) refuse(error.body.error.field, error.message);
      else patchStatus.replaceChildren(errorLine(error));
    }
  } }, el("h3", {}, "Edit config (JSON merge patch)"), patchText, fieldError, el("button", { type: "submit", id: "apply-patch" }, "Apply"), patchStatus);

  const actionStatus = el("p", { role: "status", id: "action-status" });
  // outcome(response) says what happened: cancel answers "cancelled" or
  // "requested" (a worker is mid-step and stops within a second).
  const act = (path, outcome) => async () => {
    actionStatus.replaceChildren();
    try { const r = await api("POST", path); setAgent(r.agent ?? r); actionStatus.replaceChildren(el("span", { class: "notice" }, outcome(r))); }
    catch (error) { actionStatus.replaceChildren(errorLine(error)); }
  };
  const controls = el("div", { class: "toolbar" },
    el("button", { type: "button", id: "cancel", onclick: act(`/v1/agents/${id}/cancel`, (r) => `cancel: ${r.status}`) }, "Cancel turn"),
    el("button", { type: "button", id: "archive", onclick: act(`/v1/agents/${id}/archive`, () => "archived") }, "Archive"), actionStatus);

  if (!render(el("h1", {}, `Agent ${id}`), stateLine, streamStatus, controls, configView, pending.box,
    el("h2", {}, "Timeline"), timeline, live, el("div", { class: "actions" }, sendForm, patchForm))) {
    stream.stop();
    return;
  }
  pending.load().catch(() => {});
  stopCurrent = () => stream.stop();
}

// ---- operations ------------------------------------------------------------

async function operationsPage(render) {
  await loadProject();
  const ops = await api("GET", "/v1/operations");
  render(el("h1", {}, "Operations"),
    el("h2", {}, "Queue depth"), counts(ops.agents_by_state),
    el("h2", {}, "Workers"), table("workers", ["Worker", "Agents held", "Soonest lease expiry", "Agents"],
      ops.workers.map((w) => [w.worker, w.agents_held, when(w.soonest_lease_expiry), el("span", {}, w.agents.map(link))])),
    el("h2", {}, "Stuck agents"), table("stuck", ["Agent", "State", "Reason", "Since"],
      ops.stuck_agents.map((s) => [link(s.agent_id), s.state, s.reason, when(s.since)])),
    el("h2", {}, "Webhook endpoints"), table("webhooks", ["URL", "Pending", "Due", "Oldest due", "In flight", "Failed", "Recent failures"],
      ops.webhooks.map((w) => [w.url, w.pending, w.due, when(w.oldest_due_at), w.in_flight, w.failed,
        el("ul", {}, w.recent_failures.map((f) => el("li", {},
          `${f.event_type} (${f.status}, ${f.attempts} attempt${f.attempts === 1 ? "" : "s"}): ${[f.last_status_code && `HTTP ${f.last_status_code}`, f.last_error].filter(Boolean).join(" ")}`)))])),
    el("h2", {}, "Machines"), table("machines", ["Machine", "Online", "Last heartbeat", "Queued", "Running commands"],
      ops.machines.map((m) => [m.name, m.online ? "online" : "offline", when(m.last_heartbeat_at), m.queued,
        el("ul", {}, m.running.map((c) => el("li", {}, el("code", {}, c.command), " · ", link(c.agent_id), ` · since ${when(c.accepted_at)}`)))])));
}

// ---- routing ---------------------------------------------------------------

async function route() {
  const mine = ++navigation;
  const render = showFor(mine);
  if (!sessionStorage.getItem(KEY)) { signIn(); return; }
  const hash = location.hash.replace(/^#/, "") || "/agents";
  const [path, queryString] = hash.split("?");
  const params = new URLSearchParams(queryString ?? "");
  try {
    const agentMatch = path.match(/^\/agents\/([0-9a-f-]{36})$/i);
    if (agentMatch) await agentPage(agentMatch[1], render);
    else if (path === "/operations") await operationsPage(render);
    else await agentsPage(params, render);
    if (mine === navigation) main.focus({ preventScroll: true });
  } catch (error) {
    if (mine !== navigation) return;
    if (error.status === 401) { sessionStorage.removeItem(KEY); signIn(error.message); return; }
    render(el("h1", {}, "Error"), errorLine(error));
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  location.hash = "#/agents";
  signIn("Signed out.");
});
window.addEventListener("hashchange", route);
route();
