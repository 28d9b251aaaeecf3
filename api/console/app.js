// The Holdfast console: a hash-routed page over the /v1 API. The API key
// lives in sessionStorage only and goes out only as an Authorization header.
import { ago, duration, el, folded, markdown, maskSecrets, terminalText, usageText } from "./render.js";
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
  stopInboxCount();
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
  startInboxCount();
  return project;
}

// ---- live pages ------------------------------------------------------------

// Re-read a page every few seconds while it is shown: `load()` returns its
// nodes; each shown node whose text changed is swapped for its new one
// (found by position), and nothing moves while nothing changed, so a click
// or a read never meets a node replaced under it.
// A node's text without its relative times, which change by themselves.
function settled(node) {
  const copy = node.cloneNode(true);
  for (const time of copy.querySelectorAll("time.relative")) time.remove();
  return copy.textContent;
}

function keepFresh(nodes, load, everyMs = 5000) {
  let shown = nodes.filter((node) => node !== null && node !== undefined);
  let busy = false;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      const next = (await load()).filter((node) => node !== null && node !== undefined);
      if (next.length !== shown.length) return;
      shown = shown.map((node, i) => {
        if (settled(node) === settled(next[i]) || node.contains(document.activeElement)) {
          // Relative times age in place.
          for (const time of node.querySelectorAll("time.relative")) time.textContent = ago(time.getAttribute("datetime"));
          return node;
        }
        node.replaceWith(next[i]);
        return next[i];
      });
    } catch { /* the next tick tries again */ } finally { busy = false; }
  }, everyMs);
  return () => clearInterval(timer);
}

// ---- the inbox count in the navigation -------------------------------------

// Polled while signed in: what waits on a person or a client, project-wide.
let inboxTimer = null;

async function refreshInboxCount() {
  try {
    const inbox = await api("GET", "/v1/inbox?limit=1");
    const count = document.getElementById("inbox-count");
    count.textContent = String(inbox.total);
    count.dataset.count = String(inbox.total);
    document.getElementById("inbox-link").setAttribute("aria-label", `Inbox, ${inbox.total} waiting`);
  } catch { /* the next tick tries again; a revoked key signs out on the next navigation */ }
}

function startInboxCount() {
  if (inboxTimer !== null) return;
  refreshInboxCount();
  inboxTimer = setInterval(refreshInboxCount, 3000);
}

function stopInboxCount() {
  clearInterval(inboxTimer);
  inboxTimer = null;
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
// A relative time with the exact one on hover.
const relative = (t) => (t ? el("time", { class: "relative", datetime: t, title: new Date(t).toLocaleString() }, ago(t)) : "—");
// An agent's name: `name` in its metadata, if it has one.
const agentName = (metadata) => (typeof metadata?.name === "string" && metadata.name.trim() ? metadata.name.trim() : null);

// How an agent stands, failure first: a last turn that failed (or hit a
// limit) leaves the agent idle, and "idle" would hide it.
function standing(agent) {
  const outcome = agent.last_turn?.outcome;
  if (agent.state === "idle" && (outcome === "failed" || outcome === "limit")) return outcome === "limit" ? "stopped at a limit" : "failed";
  return agent.state;
}

function metadataChips(metadata) {
  return el("span", { class: "chips" }, Object.entries(metadata ?? {}).map(([k, v]) =>
    el("span", { class: "chip" }, `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)));
}

// ---- agents ----------------------------------------------------------------

// The counts, each a link to the list it counts.
function counts(byState, byOutcome = {}) {
  return el("div", { class: "counts", id: "counts" },
    Object.entries(byState).map(([state, n]) => el("a", { class: "count", "data-state": state, href: `#/agents?state=${state}` }, `${state}: ${n}`)),
    ["failed", "limit"].filter((o) => byOutcome[o] !== undefined).map((o) =>
      el("a", { class: `count${byOutcome[o] > 0 ? " failed" : ""}`, "data-outcome": o, href: `#/agents?outcome=${o}` }, `${o === "limit" ? "stopped at a limit" : "failed"}: ${byOutcome[o]}`)));
}

async function agentsPage(params, render) {
  const nodes = await agentsNodes(params);
  if (!render(...nodes)) return;
  stopCurrent = keepFresh(nodes, () => agentsNodes(params));
}

async function agentsNodes(params) {
  const project = await loadProject();
  const state = params.get("state") ?? "";
  const outcome = params.get("outcome") ?? "";
  const q = params.get("q") ?? "";
  const query = new URLSearchParams({ order: "activity", limit: params.get("limit") ?? "50" });
  if (state) query.set("state", state);
  if (outcome) query.set("outcome", outcome);
  if (q) query.set("q", q);
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  const list = await api("GET", `/v1/agents?${query}`);
  const stateSelect = el("select", { id: "state-filter", "aria-label": "State" },
    ["", "idle", "ready", "running", "waiting", "archived"].map((s) =>
      el("option", { value: s, selected: s === state }, s || "any state")));
  const outcomeSelect = el("select", { id: "outcome-filter", "aria-label": "Last turn" },
    [["", "any last turn"], ["failed", "failed"], ["limit", "stopped at a limit"], ["cancelled", "cancelled"], ["completed", "completed"]].map(([value, label]) =>
      el("option", { value, selected: value === outcome }, label)));
  const search = el("input", { id: "search", type: "search", value: q, placeholder: "id, key=value, or words said", "aria-label": "Search" });
  const filter = el("form", { class: "toolbar", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (stateSelect.value) next.set("state", stateSelect.value);
    if (outcomeSelect.value) next.set("outcome", outcomeSelect.value);
    if (search.value.trim()) next.set("q", search.value.trim());
    location.hash = `#/agents?${next}`;
  } }, stateSelect, outcomeSelect, search, el("button", { type: "submit", id: "apply-filter" }, "Filter"));
  const rows = list.agents.map((agent) => {
    const name = agentName(agent.config?.metadata);
    const shown = standing(agent);
    const turn = agent.last_turn;
    return [
      el("span", { class: "agent-title" }, name ? el("strong", {}, name) : null, name ? " " : null, link(agent.id)),
      el("span", { class: `standing ${shown === agent.state ? "" : "failed"}`, title: turn?.error ? `${turn.error.type}: ${turn.error.message}` : null }, shown),
      turn ? `${turn.outcome ?? "open"}${turn.ended_at ? ` · ${duration(new Date(turn.ended_at) - new Date(turn.started_at))}` : ""}` : "—",
      agent.config?.model?.name ?? "",
      metadataChips(agent.config?.metadata),
      // The time the list is ordered by (latest event, else creation).
      relative(agent.activity_at),
    ];
  });
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
  return [el("h1", {}, "Agents"), counts(project.agents_by_state, project.agents_by_last_turn_outcome), filter,
    table("agents", ["Agent", "State", "Last turn", "Model", "Metadata", "Last activity"], rows),
    el("p", { id: "no-agents", hidden: rows.length !== 0 }, "No agents match."), pager];
}

// ---- answering: approvals, questions, tool results --------------------------

// The forms that answer what waits, shared by the inbox and an agent's
// page. `submit(what, action)` sends and reports; `by()` is who answers.
let formIds = 0;

function approvalForm({ id, title, shown, by, submit }) {
  const reasonId = `reason-${++formIds}`;
  const reason = el("input", { id: reasonId, placeholder: "optional" });
  const decide = (decision) => submit(`${decision} ${title}`, () => api("POST", `/v1/approvals/${id}`, { decision, by: by(), reason: reason.value || undefined }));
  return el("form", { class: "approval", "data-id": id, onsubmit: (e) => e.preventDefault() },
    el("h3", {}, title), folded("what it asks", shown),
    el("div", { class: "toolbar" }, el("label", { for: reasonId }, "Reason"), reason,
      el("button", { type: "button", class: "primary approve", onclick: () => decide("approve") }, "Approve"),
      el("button", { type: "button", class: "deny", onclick: () => decide("deny") }, "Deny")));
}

// The question is the answer box's label.
function questionForm({ id, question, by, submit }) {
  const labelId = `question-${++formIds}`;
  const answer = el("input", { class: "answer", "aria-labelledby": labelId, required: true });
  return el("form", { class: "question", "data-id": id, onsubmit: (e) => { e.preventDefault(); submit("answer", () => api("POST", `/v1/questions/${id}/answer`, { answer: answer.value, by: by() })); } },
    el("h3", { id: labelId }, question), answer, " ", el("button", { type: "submit" }, "Answer"));
}

// A result that is not JSON is refused at its field, and nothing is sent.
function toolCallForm({ id, name, input, submit }) {
  const errorId = `result-error-${++formIds}`;
  const output = el("textarea", { class: "tool-output", "aria-label": `Result for ${name} (JSON)`, "aria-describedby": errorId }, "{}");
  const fieldError = el("p", { id: errorId, class: "field-error", role: "alert" });
  return el("form", { class: "tool-call", "data-id": id, onsubmit: (e) => {
    e.preventDefault();
    let value;
    try { value = JSON.parse(output.value); } catch {
      output.setAttribute("aria-invalid", "true");
      fieldError.textContent = "The result must be JSON.";
      return;
    }
    output.removeAttribute("aria-invalid");
    fieldError.textContent = "";
    submit(`result for ${name}`, () => api("POST", `/v1/tool-calls/${id}/result`, { output: value }));
  } }, el("h3", {}, `Result for ${name}`), folded(`${name} input`, input), output, fieldError, el("button", { type: "submit" }, "Send result"));
}

// A 409's body says who answered first.
function conflictText(error) {
  const current = error.body?.approval ?? error.body?.question ?? error.body?.tool_call;
  if (!current) return error.message;
  if (current.decided_by) return `${current.status} by ${current.decided_by}`;
  if (current.answered_by) return `"${current.answer}" by ${current.answered_by}`;
  return JSON.stringify(current.output ?? current.status);
}

// ---- the inbox -------------------------------------------------------------

const KIND_LABELS = { approval: "Approval", budget_approval: "Budget", question: "Question", tool_call: "Tool result", command: "Command" };

async function inboxPage(params, render) {
  await loadProject();
  const kind = params.get("kind") ?? "";
  const metadata = params.get("metadata") ?? "";
  const kindSelect = el("select", { id: "kind-filter", "aria-label": "Kind" },
    ["", ...Object.keys(KIND_LABELS)].map((k) => el("option", { value: k, selected: k === kind }, k ? KIND_LABELS[k] : "every kind")));
  const metadataInput = el("input", { id: "metadata-filter", value: metadata, placeholder: '{"team":"billing"}', "aria-label": "Agent metadata (JSON)", "aria-describedby": "metadata-error" });
  const metadataError = el("p", { id: "metadata-error", class: "field-error", role: "alert" });
  const filter = el("form", { class: "toolbar", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (kindSelect.value) next.set("kind", kindSelect.value);
    if (metadataInput.value.trim()) next.set("metadata", metadataInput.value.trim());
    location.hash = `#/inbox?${next}`;
  } }, kindSelect, metadataInput, el("button", { type: "submit", id: "apply-inbox-filter" }, "Filter"));
  const answerBy = el("input", { id: "answer-by", value: "console" });
  const by = () => answerBy.value || "console";
  const notice = el("p", { id: "inbox-notice", role: "status" });
  const total = el("p", { id: "inbox-total" });
  const items = el("div", { id: "inbox-items" });
  // The cards shown, by item: a reload keeps a card still waiting (and
  // what was typed into it), adds new ones, drops the rest.
  let shown = new Map();
  const answeredHere = new Set();
  let loads = 0;

  function card(item) {
    const key = `${item.kind}:${item.id}`;
    const submit = async (what, action) => {
      notice.replaceChildren();
      try {
        await action();
        answeredHere.add(key);
        notice.replaceChildren(el("span", { class: "notice" }, `${what}: sent`));
      } catch (error) {
        if (error.status === 409) {
          answeredHere.add(key);
          notice.replaceChildren(el("span", { class: "error conflict", role: "alert" }, `${what}: already answered: ${conflictText(error)}`));
        } else notice.replaceChildren(el("span", { class: "error", role: "alert" }, `${what}: ${error.message}`));
      }
      load().catch(() => {});
      refreshInboxCount();
    };
    const d = item.detail ?? {};
    let answer;
    switch (item.kind) {
      case "approval": answer = approvalForm({ id: item.id, title: `Approve ${d.name}?`, shown: d.input, by, submit }); break;
      case "budget_approval": answer = approvalForm({ id: item.id, title: `Continue past ${d.budget?.budget} (${d.budget?.value} of ${d.budget?.limit})?`, shown: d.budget, by, submit }); break;
      case "question": answer = questionForm({ id: item.id, question: d.question, by, submit }); break;
      case "tool_call": answer = toolCallForm({ id: item.id, name: d.name, input: d.input, submit }); break;
      default:
        answer = el("div", { class: "command-wait" },
          el("p", {}, el("code", {}, d.command), ` waits for machine ${d.machine} (${d.machine_online ? "online" : "offline"}) to accept it.`),
          el("a", { href: `#/agents/${item.agent_id}` }, "Open the agent to cancel its turn"));
    }
    const name = agentName(item.agent_metadata);
    const waited = el("span", { class: "age" });
    const node = el("article", { class: `card inbox-item ${item.kind}`, "data-kind": item.kind, "data-id": item.id, "data-key": key },
      el("div", { class: "meta" }, el("span", { class: "kind" }, KIND_LABELS[item.kind] ?? item.kind), " · ",
        el("a", { href: `#/agents/${item.agent_id}` }, name ?? item.agent_id), " · ", waited),
      // The forms head themselves with what they ask; a command says it here.
      item.kind === "command" ? el("p", { class: "summary" }, item.summary) : null, answer);
    node.setAge = (seconds) => { waited.textContent = `waiting ${duration(Math.round(seconds) * 1000)}`; };
    node.summaryText = item.summary;
    return node;
  }

  async function load() {
    const mine = ++loads;
    const query = new URLSearchParams({ limit: "100" });
    if (kind) query.set("kind", kind);
    if (metadata) query.set("metadata", metadata);
    let inbox;
    try { inbox = await api("GET", `/v1/inbox?${query}`); }
    catch (error) {
      if (error.body?.error?.field === "metadata") {
        metadataInput.setAttribute("aria-invalid", "true");
        metadataError.textContent = error.message;
        return;
      }
      throw error;
    }
    if (mine !== loads) return;
    total.textContent = inbox.total === 0 ? "Nothing waits on you." : `${inbox.total} waiting, oldest first${inbox.has_more ? ` (the oldest ${inbox.items.length} shown)` : ""}.`;
    const next = new Map();
    for (const item of inbox.items) {
      const key = `${item.kind}:${item.id}`;
      const node = shown.get(key) ?? card(item);
      node.setAge(item.age_seconds);
      next.set(key, node);
    }
    // What went away without an answer from here was answered elsewhere.
    const elsewhere = [...shown.keys()].filter((key) => !next.has(key) && !answeredHere.has(key));
    if (elsewhere.length) {
      notice.replaceChildren(el("span", { class: "notice elsewhere" },
        `Answered elsewhere: ${elsewhere.map((key) => shown.get(key).summaryText).join("; ")}`));
    }
    const unchanged = next.size === shown.size && [...next.keys()].every((key, i) => [...shown.keys()][i] === key);
    shown = next;
    if (!unchanged || items.childElementCount !== next.size) items.replaceChildren(...next.values());
  }

  await load();
  if (!render(el("h1", {}, "Inbox"), el("p", { class: "meta" }, "Everything waiting on a person or a client, oldest first. Answer it here."),
    filter, metadataError, el("label", {}, "Answer as ", answerBy), notice, total, items)) return;
  const timer = setInterval(() => { load().catch(() => {}); }, 3000);
  stopCurrent = () => clearInterval(timer);
}

// ---- one agent -------------------------------------------------------------

// What each event is, in words; the raw event stays one click away.
const EVENT_LABELS = {
  "input.received": "Input", "input.removed": "Input removed", "turn.started": "Turn started",
  "model.response": "Answer", "model.retry": "Model call failed, retrying", "model.interrupted": "Model call interrupted",
  "tool_call.created": "Tool call", "tool_call.completed": "Tool result", "tool_call.interrupted": "Tool call interrupted",
  "tool.unavailable": "Tool unavailable", "content.left_out": "File left out", "step.retry": "Step failed, retrying", "worker.lost": "Worker lost, step runs again",
  "approval.requested": "Approval asked", "approval.answered": "Approval answered",
  "question.asked": "Question asked", "question.answered": "Question answered", "command.queued": "Command queued",
  "command.accepted": "Command started", "command.finished": "Command finished", "command.failed": "Command failed",
  "command.unknown": "Command outcome unknown", "machine.unreachable": "Machine unreachable",
  "subagent.started": "Subagent started", "subagent.finished": "Subagent finished", "context.compacted": "Context compacted",
  "config.updated": "Config changed", "turn.completed": "Turn completed", "turn.cancelled": "Turn cancelled",
  "turn.failed": "Turn failed", "agent.archived": "Archived", "input.updated": "Input moved",
  "schedule.fired": "Schedule fired", "schedule.skipped": "Schedule skipped",
  "turn.failed": "Turn failed", "agent.archived": "Archived", "agent.forked": "Forked",
  "replay.diverged": "Replay diverged", "replay.completed": "Replay finished",
};

const DECIDED = { approve: "approved", deny: "denied" };

// An image or document the agent was sent, fetched with the key (never by
// URL: the key goes only in a header) and shown as a data: thumbnail.
function attachmentThumb(agentId, block) {
  const source = block.source ?? {};
  const label = `${block.type} ${source.media_type ?? ""} (${source.size_bytes ?? "?"} bytes)`;
  if (block.type !== "image") return el("p", { class: "attachment" }, label);
  const img = el("img", { class: "thumb", alt: `image sent to the agent, ${source.media_type ?? ""}` });
  const key = sessionStorage.getItem(KEY);
  fetch(`/v1/agents/${agentId}/attachments/${source.attachment_id}`, { headers: { Authorization: `Bearer ${key}` }, cache: "no-store" })
    .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((blob) => new Promise((resolve) => { const reader = new FileReader(); reader.onload = () => resolve(reader.result); reader.readAsDataURL(blob); }))
    .then((url) => { img.src = url; })
    .catch((error) => { img.replaceWith(el("p", { class: "error" }, `${label}: ${error.message}`)); });
  return el("figure", { class: "attachment" }, img, el("figcaption", { class: "meta" }, label));
}

// An input's content as it can be sent again. The API takes files as
// base64 (or URLs), not as references to the files it stored: each stored
// file is read back (with the key, in a header) and sent as base64, and the
// API, which stores a file once per agent, keeps the one it has.
async function resendable(agentId, content) {
  if (!Array.isArray(content)) return content;
  const key = sessionStorage.getItem(KEY);
  return Promise.all(content.map(async (block) => {
    if (block.source?.type !== "attachment") return block;
    const response = await fetch(`/v1/agents/${agentId}/attachments/${block.source.attachment_id}`,
      { headers: { Authorization: `Bearer ${key}` }, cache: "no-store" });
    if (!response.ok) throw new Error(`reading the ${block.type} ${block.source.attachment_id}: HTTP ${response.status}`);
    const blob = await response.blob();
    const dataUrl = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(blob);
    });
    return { ...block, source: { type: "base64", media_type: block.source.media_type, data: String(dataUrl).slice(String(dataUrl).indexOf(",") + 1) } };
  }));
}

function contentView(agentId, content) {
  if (typeof content === "string") return el("div", { class: "input-text" }, markdown(content));
  if (!Array.isArray(content)) return folded("content", content);
  return el("div", { class: "input-blocks" }, content.map((block) => {
    if (block.type === "text") return el("div", { class: "input-text" }, markdown(block.text ?? ""));
    if (block.source?.type === "attachment") return attachmentThumb(agentId, block);
    return folded(`${block.type} block`, block);
  }));
}

// A run_command call as one card: the command as code, where it stands,
// and its output as terminal text (textContent, escape sequences removed:
// output is never markup and moves nothing): while it runs, the pieces the
// machine relays (`command_output` on the stream, never saved), then its
// exit code, duration and the output its result saved, which replaces them.
function commandCard(call) {
  const status = el("span", { class: "command-status" }, "asked");
  const elapsed = el("span", { class: "command-elapsed" });
  const stdout = el("pre", { class: "terminal stdout", hidden: true, "aria-label": "stdout" });
  const stderr = el("pre", { class: "terminal stderr", hidden: true, "aria-label": "stderr" });
  const node = el("div", { class: "command", "data-tool-call": call.tool_call_id },
    el("pre", { class: "command-line" }, el("code", {}, `$ ${call.input?.command ?? ""}`)),
    el("p", { class: "meta" }, status, " ", elapsed), stdout, stderr);
  let timer = null;
  let startedAt = null;
  const stopClock = () => { clearInterval(timer); timer = null; };
  const output = (pre, text, truncated) => {
    pre.textContent = "";
    if (!text) { pre.hidden = true; return; }
    pre.textContent = terminalText(truncated ? `${text}\n[truncated]` : text);
    pre.hidden = false;
  };
  let ended = false;
  const liveNote = el("p", { class: "meta live-note", hidden: true });
  node.append(liveNote);
  // A piece of what the command printed while it runs, appended as text.
  node.onOutput = (piece) => {
    if (ended) return;
    if (piece.limit_reached) {
      liveNote.textContent = "The live output stops here (its bound); the whole output shows when the command ends.";
      liveNote.hidden = false;
      return;
    }
    const pre = piece.stream === "stderr" ? stderr : stdout;
    pre.append(terminalText(piece.text ?? ""));
    pre.hidden = pre.textContent === "";
    node.classList.add("streaming");
  };
  node.onEvent = (event) => {
    const d = event.data ?? {};
    switch (event.type) {
      case "command.queued": status.textContent = `queued on ${d.machine}`; break;
      case "command.accepted":
        startedAt = new Date(d.accepted_at ?? event.created_at);
        status.textContent = "running";
        node.classList.add("running");
        elapsed.textContent = "";
        stopClock();
        timer = setInterval(() => { elapsed.textContent = duration(Date.now() - startedAt); }, 1000);
        break;
      case "command.finished": case "command.unknown": {
        stopClock();
        ended = true;
        liveNote.hidden = true;
        node.classList.remove("running", "streaming");
        const took = startedAt ? ` · ${duration(new Date(event.created_at) - startedAt)}` : "";
        const code = d.timed_out ? "timed out" : d.signal ? `signal ${d.signal}` : `exit ${d.exit_code}`;
        status.textContent = event.type === "command.unknown" ? `outcome unknown: ${d.message ?? ""}` : `${code}${took}`;
        node.classList.toggle("failed", event.type === "command.unknown" || d.exit_code !== 0);
        elapsed.textContent = "";
        output(stdout, d.stdout, d.stdout_truncated);
        output(stderr, d.stderr, d.stderr_truncated);
        break;
      }
      case "command.failed": case "machine.unreachable":
        stopClock();
        ended = true;
        node.classList.remove("running", "streaming");
        node.classList.add("failed");
        status.textContent = event.type === "machine.unreachable" ? `machine ${d.machine} unreachable` : `never ran: ${d.message ?? d.reason}`;
        elapsed.textContent = "";
        break;
      default:
    }
  };
  node.stop = stopClock;
  return node;
}

// One event as a card: a human label, what it says, the raw event folded.
// `commands` maps tool call ids to their command cards.
function eventCard(agentId, event, commands, turnStart) {
  const d = event.data ?? {};
  const at = new Date(event.created_at);
  const offset = turnStart ? ` · +${duration(at - turnStart)}` : "";
  const card = el("article", { class: `card event ${event.type.replace(/\./g, "-")}`, "data-seq": event.seq, "data-type": event.type },
    el("h3", {}, EVENT_LABELS[event.type] ?? event.type),
    el("div", { class: "meta" }, `#${event.seq} · ${at.toLocaleTimeString()}${offset}`));
  switch (event.type) {
    case "input.received": card.append(contentView(agentId, d.content)); break;
    case "model.response": {
      for (const block of d.message ?? []) {
        if (block.type === "text") card.append(el("div", { class: "model-text" }, markdown(block.text ?? "")));
        else if (block.type === "tool_use") card.append(folded(`${block.name} input`, block.input));
      }
      if (d.usage) card.append(el("p", { class: "meta usage" }, usageText(d.usage)));
      break;
    }
    case "tool_call.created":
      if (d.kind === "command") {
        const command = commandCard({ tool_call_id: d.tool_call_id ?? d.id, input: d.input });
        commands.set(d.tool_call_id ?? d.id, command);
        card.append(command);
      } else card.append(el("p", {}, el("code", {}, d.name), ` (${d.kind})`), folded(`${d.name} input`, d.input));
      break;
    case "tool_call.completed":
      card.append(el("p", { class: d.is_error ? "error" : "" }, el("code", {}, d.name), d.is_error ? " — error" : ""),
        // A large output is only previewed in its event; the tool call has it whole.
        d.output_omitted ? folded(`${d.name} output (first of ${d.output_bytes} bytes)`, d.output_preview) : folded(`${d.name} output`, d.output));
      break;
    case "model.retry": case "step.retry": card.append(el("p", {}, `attempt ${d.attempt}, retrying in ${duration(d.delay_ms)}: ${d.error?.message ?? JSON.stringify(d.error)}`)); break;
    case "approval.requested":
      if (d.kind === "budget") card.append(el("p", {}, `continue past ${d.budget.budget}?`), folded(`budget ${d.budget.budget}`, d.budget));
      else card.append(el("p", {}, `approve ${d.name}?`), folded(`${d.name} input`, d.input));
      break;
    case "approval.answered": card.append(el("p", {}, `${DECIDED[d.decision] ?? d.decision} by ${d.by}${d.reason ? `: ${d.reason}` : ""}`)); break;
    case "question.asked": card.append(el("p", {}, d.question)); break;
    case "question.answered": card.append(el("p", {}, `${d.answer ?? ""} (${d.by ?? ""})`)); break;
    case "command.queued": case "command.accepted": case "command.finished": case "command.failed": case "command.unknown": case "machine.unreachable": {
      const command = commands.get(d.tool_call_id);
      if (command) command.onEvent(event);
      card.classList.add("step");
      if (event.type === "command.failed" || event.type === "command.unknown") card.append(el("p", { class: "error" }, d.message ?? d.reason ?? ""));
      break;
    }
    case "turn.started": case "turn.completed": case "turn.cancelled": card.classList.add("step"); break;
    case "subagent.started": case "subagent.finished":
      if (d.child_agent_id) card.append(el("a", { href: `#/agents/${d.child_agent_id}` }, `subagent ${d.child_agent_id}`));
      break;
    case "turn.failed": card.classList.add("failed"); card.append(el("p", { class: "error" }, `${d.error?.type}: ${d.error?.message}`)); break;
    case "config.updated": card.append(folded("new config", maskSecrets(d.config))); break;
    default:
  }
  card.append(folded(`raw event #${event.seq}`, event), forkButton(agentId, event.seq));
  return card;
}

// "Fork here": a new agent whose history is this one's up to this event
// (POST /v1/agents/{id}/fork), opened at once.
function forkButton(agentId, seq) {
  const status = el("span", { role: "status" });
  const button = el("button", { type: "button", class: "fork-here", "data-fork-seq": seq, onclick: async () => {
    button.disabled = true;
    status.replaceChildren();
    try {
      const fork = await api("POST", `/v1/agents/${agentId}/fork`, { at: { seq } });
      location.hash = `#/agents/${fork.id}`;
    } catch (error) { status.replaceChildren(errorLine(error)); button.disabled = false; }
  } }, "Fork here");
  return el("div", { class: "fork" }, button, status);
}

// ---- replays ---------------------------------------------------------------

const callsText = (calls) => (calls.length === 0 ? "—" : calls.map((c) => `${c.name} ${JSON.stringify(c.input)}`).join("\n"));

// One row per replayed turn: the source beside the replay, the first
// divergence marked.
function replayRows(report) {
  return report.turns.map((t) => {
    const d = t.first_divergence;
    const mark = t.diverged
      ? el("span", { class: "diverged error" }, `diverged at call ${d.position + 1}: ${d.source ? d.source.name : "no call"} → ${d.replay ? d.replay.name : "no call"}`)
      : el("span", { class: "same" }, t.answer_equal ? "same" : "same calls, other answer");
    return [String(t.turn), el("div", { class: "model-text" }, t.source.answer ?? "—"), el("div", { class: "model-text" }, t.replay.answer ?? "—"),
      el("pre", {}, callsText(t.source.tool_calls)), el("pre", {}, callsText(t.replay.tool_calls)), mark,
      `${usageText(t.source.usage)} → ${usageText(t.replay.usage)}`];
  });
}

function replayNodes(report) {
  const totals = report.totals;
  const status = el("p", { id: "replay-status", class: report.status === "failed" ? "failed" : "" },
    `${report.status}${report.error ? ` (${report.error.type}: ${report.error.message})` : ""} · ${report.turns_replayed} of ${report.turns_total} turns · ` +
    `${totals.turns_equal} equal, ${totals.turns_diverged} diverged`);
  const rows = replayRows(report);
  const view = table("replay-turns", ["Turn", "Source answer", "Replay answer", "Source calls", "Replay calls", "Calls", "Usage (source → replay)"], rows);
  view.querySelectorAll("tbody tr").forEach((tr, i) => { if (report.turns[i].diverged) tr.classList.add("diverged"); });
  return [status, el("p", { class: "meta" }, `Totals: ${usageText(totals.source)} → ${usageText(totals.replay)}`), view];
}

async function replayPage(id, render) {
  await loadProject();
  const report = await api("GET", `/v1/replays/${id}`);
  const nodes = replayNodes(report);
  if (!render(el("h1", {}, `Replay ${id}`),
    el("p", {}, "Of ", link(report.source_agent_id), " · on ", link(report.agent_id), " · config change ", el("code", {}, JSON.stringify(report.config_patch))),
    ...nodes)) return;
  if (report.status === "running") stopCurrent = keepFresh(nodes, async () => replayNodes(await api("GET", `/v1/replays/${id}`)), 1000);
}

// The agent's replays, and a form to start one with a config change.
function replaysBox(agentId) {
  const list = el("ul", { id: "replays" });
  const load = async () => {
    const { replays } = await api("GET", `/v1/agents/${agentId}/replays`);
    list.replaceChildren(...replays.map((r) => el("li", {}, el("a", { href: `#/replays/${r.id}` }, `replay ${r.id}`),
      ` · ${r.status} · ${r.turns_replayed}/${r.turns_total} turns · ${JSON.stringify(r.config_patch)}`)));
  };
  const patch = el("textarea", { id: "replay-config", rows: 2, required: true, placeholder: '{"model": {"name": "claude-sonnet-4-5"}}' });
  const status = el("span", { role: "status" });
  const form = el("form", { id: "replay-form", onsubmit: async (e) => {
    e.preventDefault();
    status.replaceChildren();
    try {
      const report = await api("POST", `/v1/agents/${agentId}/replays`, { config: JSON.parse(patch.value) });
      location.hash = `#/replays/${report.id}`;
    } catch (error) { status.replaceChildren(errorLine(error)); }
  } }, el("label", { for: "replay-config" }, "Replay this agent's turns with a config change (tool results come from the recording; nothing runs)"),
    patch, el("button", { type: "submit" }, "Replay"), status);
  return { box: el("section", { id: "replays-box" }, el("h2", {}, "Replays"), list, form), load };
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
  // still pending (and what was typed into it), adds new ones, drops the
  // rest, and says which went away answered by someone else.
  let shown = new Map();
  const answeredHere = new Set();
  const submitFor = (key) => async (what, action) => {
    notice.replaceChildren();
    try { await action(); answeredHere.add(key); notice.replaceChildren(el("span", { class: "notice" }, `${what}: sent`)); refresh(); }
    catch (error) {
      if (error.status === 409) {
        answeredHere.add(key);
        notice.replaceChildren(el("span", { class: "error conflict", role: "alert" }, `${what}: already answered: ${conflictText(error)}`));
        refresh();
      } else notice.replaceChildren(errorLine(error));
    }
  };
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
      ...approvals.approvals.map((a) => [`approval:${a.id}`, (key) => approvalForm(a.kind === "budget"
        ? { id: a.id, title: `Continue past ${a.budget.budget} (${a.budget.value} of ${a.budget.limit})?`, shown: a.budget, by, submit: submitFor(key) }
        : { id: a.id, title: `Approve ${a.tool_name}?`, shown: a.tool_input, by, submit: submitFor(key) })]),
      ...questions.questions.map((q) => [`question:${q.id}`, (key) => questionForm({ id: q.id, question: q.question, by, submit: submitFor(key) })]),
      ...calls.tool_calls.filter((c) => c.kind === "custom").map((c) => [`tool-call:${c.id}`, (key) => toolCallForm({ id: c.id, name: c.name, input: c.input, submit: submitFor(key) })]),
    ];
    const unchanged = pending.length === shown.size && pending.every(([key]) => shown.has(key));
    if (unchanged && box.contains(notice)) return; // no move, so focus stays where the user typed
    const elsewhere = [...shown.keys()].filter((key) => !pending.some(([k]) => k === key) && !answeredHere.has(key));
    if (elsewhere.length) {
      notice.replaceChildren(el("span", { class: "notice elsewhere" },
        `Answered elsewhere: ${elsewhere.map((key) => shown.get(key).querySelector("h3")?.textContent ?? key).join("; ")}`));
    }
    const next = new Map(pending.map(([key, build]) => [key, shown.get(key) ?? build(key)]));
    shown = next;
    box.replaceChildren(notice, ...(next.size ? [...heading, ...next.values()] : []));
  }
  return { box, load };
}

// ---- a turn's waterfall ----------------------------------------------------

// A turn's steps from its events: model calls (their attempts grouped),
// tool calls, approvals, questions and commands, each {kind, label, start,
// end, note} in ms since the epoch. A step's events say when it was asked
// for and when it ended; a model call has no event of its own start, so it
// starts when the turn was ready for it: at the event before it, or after a
// retry, once the retry's delay had passed. What has not ended by `now` runs.
function turnSteps(events, now) {
  const steps = [];
  const waits = new Map();
  let call = null;
  let previous = null;
  const begin = (key, kind, label, at) => {
    const step = { kind, label, start: at, end: null, note: "" };
    waits.set(key, step);
    steps.push(step);
    return step;
  };
  const end = (key, at, note) => {
    const step = waits.get(key);
    if (!step) return;
    step.end = at;
    if (note) step.note = note;
    waits.delete(key);
  };
  const attempt = (at, error) => {
    if (!call) { call = { kind: "model", label: "Model call", start: previous ?? at, end: null, note: "", attempts: [], next: previous ?? at }; steps.push(call); }
    call.attempts.push({ start: Math.min(call.next, at), end: at, error });
    call.end = at;
  };
  for (const event of events) {
    const d = event.data ?? {};
    const at = new Date(event.created_at).getTime();
    switch (event.type) {
      case "model.retry":
        attempt(at, `${d.error?.type ?? "error"}: ${d.error?.message ?? ""}`);
        call.next = at + (d.delay_ms ?? 0);
        break;
      case "model.response": case "model.interrupted":
        attempt(at, event.type === "model.interrupted" ? "interrupted" : null);
        call = null;
        break;
      case "turn.failed": case "turn.cancelled":
        // A call being retried ends with the turn.
        if (call) { attempt(at, `${d.error?.type ?? "cancelled"}: ${d.error?.message ?? "the turn was cancelled"}`); call = null; }
        break;
      case "tool_call.created":
        if (d.kind !== "command" && d.kind !== "question") begin(`tool:${d.id}`, "tool", `Tool ${d.name}`, at);
        break;
      case "tool_call.completed": end(`tool:${d.tool_call_id}`, at, d.is_error ? "error" : ""); break;
      case "approval.requested":
        begin(`approval:${d.approval_id}`, "approval", d.kind === "budget" ? `Approval to pass ${d.budget?.budget}` : `Approval of ${d.name}`, at);
        break;
      case "approval.answered": end(`approval:${d.approval_id}`, at, `${DECIDED[d.decision] ?? d.decision} by ${d.by}`); break;
      case "question.asked": begin(`question:${d.question_id}`, "question", `Question: ${String(d.question ?? "").slice(0, 60)}`, at); break;
      case "question.answered": end(`question:${d.question_id}`, at, `answered by ${d.by}`); break;
      case "command.queued": begin(`command:${d.command_id}`, "command", `Command: ${String(d.command ?? "").slice(0, 60)}`, at); break;
      case "command.accepted": {
        const step = waits.get(`command:${d.command_id}`);
        if (step) step.acceptedAt = at;
        break;
      }
      case "command.finished": end(`command:${d.command_id}`, at, d.timed_out ? "timed out" : `exit ${d.exit_code}`); break;
      case "command.failed": case "command.unknown": case "machine.unreachable":
        end(`command:${d.command_id}`, at, event.type.replace(/^\w+\./, "").replace("_", " "));
        break;
      default:
    }
    previous = at;
  }
  if (call) call.attempts.push({ start: Math.min(call.next, now), end: now, error: null, running: true });
  for (const step of steps) {
    if (step.end === null || step.attempts?.at(-1)?.running) { step.end = now; step.running = true; }
  }
  return steps;
}

// The steps as bars on one time axis from the turn's start to its end (or
// now): each bar starts at its step's start and is as wide as it lasted;
// a model call's attempts are rows under it, each with its error.
function waterfall(steps, from, to) {
  const span = Math.max(to - from, 1);
  // Classes of their own (`kind-…`): the timeline's cards use `command`.
  const row = (kinds, label, start, end, note, running) => {
    const cls = kinds.split(" ").map((k) => `kind-${k}`).join(" ");
    const bar = el("div", { class: `bar ${cls}${running ? " running" : ""}` });
    bar.style.left = `${((start - from) / span) * 100}%`;
    bar.style.width = `${Math.max(((end - start) / span) * 100, 0)}%`;
    return el("li", { class: `step ${cls}`, "data-start-ms": start - from, "data-duration-ms": end - start },
      el("span", { class: "step-label", title: label }, label),
      el("span", { class: "track", "aria-hidden": "true" }, bar),
      el("span", { class: "step-duration" }, `${running ? "running, " : ""}${duration(end - start)}${note ? ` · ${note}` : ""}`));
  };
  const rows = [];
  for (const step of steps) {
    if (step.kind === "model") {
      const n = step.attempts.length;
      rows.push(row("model", n > 1 ? `Model call, ${n} attempts` : "Model call", step.start, step.end, "", step.running));
      if (n > 1) {
        step.attempts.forEach((a, i) => rows.push(row(a.error ? "attempt failed" : "attempt", `attempt ${i + 1}${a.error ? `: ${a.error}` : a.running ? "" : ": answered"}`,
          a.start, a.end, "", a.running)));
      }
    } else {
      const queued = step.acceptedAt ? `queued ${duration(step.acceptedAt - step.start)} · ` : "";
      rows.push(row(step.kind, step.label, step.start, step.end, `${queued}${step.note}`, step.running));
    }
  }
  return el("section", { class: "waterfall", "aria-label": "Steps on a time axis" },
    el("div", { class: "axis meta" }, el("span", {}, "0"), el("span", {}, duration(span))),
    el("ol", { class: "steps" }, rows));
}

// The timeline, grouped by turn: each turn a disclosure whose summary says
// what it was asked, how it ended, how long it took and what it cost;
// earlier turns fold away as a new one starts. An expanded turn shows its
// waterfall first.
function turnTimeline(agentId) {
  const root = el("section", { id: "timeline", "aria-label": "Timeline" });
  const commands = new Map();
  const turns = new Map();
  let current = null;
  let count = 0;
  // Cards that come between turns (an input arrives before its turn.started).
  let loose = [];

  function openTurn(event) {
    count += 1;
    const summary = el("summary", {}, el("span", { class: "turn-title" }, `Turn ${count}`), " ",
      el("span", { class: "turn-input" }), " ", el("span", { class: "turn-outcome" }, "running"), " ",
      el("span", { class: "turn-duration" }), " ", el("span", { class: "turn-usage" }));
    const steps = el("div", { class: "turn-steps" });
    const body = el("div", { class: "turn-body" });
    const node = el("details", { class: "turn open-turn", open: true, "data-turn": count }, summary, steps, body);
    node.startedAt = new Date(event.created_at);
    node.body = body;
    node.events = [];
    // Drawn while the turn is expanded, at most once a frame: after its
    // events (a replayed history draws once), and on opening.
    let drawing = false;
    node.drawSteps = () => {
      if (!node.open || drawing) return;
      drawing = true;
      requestAnimationFrame(() => {
        drawing = false;
        const to = node.endedAt ? node.endedAt.getTime() : Math.max(Date.now(), ...node.events.map((e) => new Date(e.created_at).getTime()));
        const found = turnSteps(node.events, to);
        steps.replaceChildren(...(found.length ? [waterfall(found, node.startedAt.getTime(), to)] : []));
      });
    };
    node.addEventListener("toggle", node.drawSteps);
    if (current) current.open = false;
    for (const card of loose) {
      body.append(card);
      const input = card.querySelector(".input-text");
      if (input && !summary.querySelector(".turn-input").textContent) summary.querySelector(".turn-input").textContent = `“${input.textContent.slice(0, 60)}”`;
    }
    loose = [];
    root.append(node);
    turns.set(count, node);
    current = node;
  }

  function endTurn(event) {
    if (!current) return;
    const outcome = { "turn.completed": "completed", "turn.cancelled": "cancelled" }[event.type]
      ?? (["limit_exceeded", "budget_exceeded"].includes(event.data?.error?.type) ? "stopped at a limit" : "failed");
    const summary = current.querySelector("summary");
    summary.querySelector(".turn-outcome").textContent = outcome;
    summary.querySelector(".turn-duration").textContent = duration(new Date(event.created_at) - current.startedAt);
    current.classList.remove("open-turn");
    current.classList.toggle("failed", event.type === "turn.failed");
    if (event.data?.usage) summary.querySelector(".turn-usage").textContent = usageText(event.data.usage);
    current.endedAt = new Date(event.created_at);
    current = null;
  }

  return {
    root,
    // A node that is not an event (an unsaved partial answer), in place.
    note(node) {
      if (current) current.body.append(node);
      else root.append(node);
    },
    add(event) {
      if (event.type === "turn.started") openTurn(event);
      const card = eventCard(agentId, event, commands, current?.startedAt);
      const turn = current;
      if (turn) { turn.body.append(card); turn.events.push(event); }
      else { root.append(card); loose.push(card); }
      if (/^turn\.(completed|failed|cancelled)$/.test(event.type)) endTurn(event);
      turn?.drawSteps();
    },
    // Each turn's tokens and cost from GET /v1/agents/{id}/usage (turn
    // numbers count turns as they open, as the timeline does).
    setUsage(usage) {
      for (const turn of usage.turns) {
        const node = turns.get(turn.turn);
        if (node) node.querySelector(".turn-usage").textContent = usageText(turn.usage);
      }
    },
    // A piece of a running command's output, to its card.
    output(piece) { commands.get(piece.tool_call_id)?.onOutput(piece); },
    stop() { for (const command of commands.values()) command.stop(); },
  };
}

// The agent's waiting inputs (GET /v1/agents/{id}/inputs): the queue, in the
// order turns will take them, with buttons to move an input up or down,
// promote it into the turn, or cancel it; and the inputs pending in the
// open turn, which can be demoted back to the queue (PATCH /v1/inputs/{id}).
function backlogBox(agentId) {
  const status = el("p", { role: "status", id: "backlog-status" });
  const list = el("ol", { id: "backlog" });
  const box = el("section", { class: "backlog", "aria-labelledby": "backlog-title" },
    el("h2", { id: "backlog-title" }, "Waiting inputs"), list, status);
  const text = (input) => (typeof input.content === "string" ? input.content
    : (input.content ?? []).map((b) => b.text ?? `[${b.type}]`).join(" ")).slice(0, 120);
  const change = (input, body, done) => async () => {
    status.replaceChildren();
    try {
      if (body === null) await api("DELETE", `/v1/inputs/${input.id}`);
      else await api("PATCH", `/v1/inputs/${input.id}`, body);
      status.replaceChildren(el("span", { class: "notice" }, done));
      await load();
    } catch (error) { status.replaceChildren(errorLine(error)); await load().catch(() => {}); }
  };
  const button = (label, name, action) => el("button", { type: "button", "aria-label": `${label}: ${name}`, onclick: action }, label);
  async function load() {
    const [queued, pendingInputs] = await Promise.all([
      api("GET", `/v1/agents/${agentId}/inputs?status=queued`),
      api("GET", `/v1/agents/${agentId}/inputs?status=pending`),
    ]);
    const rows = [];
    for (const input of pendingInputs.inputs) {
      const name = text(input);
      rows.push(el("li", { class: "pending-input", "data-input": input.id },
        el("span", { class: "meta" }, "in the turn · "), name, " ",
        button("Demote", name, change(input, { mode: "queue" }, "moved back to the queue"))));
    }
    queued.inputs.forEach((input, i) => {
      const name = text(input);
      rows.push(el("li", { class: "queued-input", "data-input": input.id },
        el("span", { class: "meta" }, `queued ${i + 1} · `), name, " ",
        i > 0 ? button("Up", name, change(input, { position: i }, "moved up")) : null,
        i < queued.inputs.length - 1 ? button("Down", name, change(input, { position: i + 2 }, "moved down")) : null,
        button("Promote", name, change(input, { mode: "steer" }, "promoted into the turn")),
        button("Cancel", name, change(input, null, "cancelled"))));
    });
    list.replaceChildren(...rows);
    box.hidden = rows.length === 0;
  }
  return { box, load };
}

// The agent's schedules (GET /v1/agents/{id}/schedules) with pause, resume
// and delete.
function schedulesBox(agentId) {
  const status = el("p", { role: "status", id: "schedules-status" });
  const body = el("div", { id: "schedules" });
  const box = el("section", { class: "schedules", "aria-labelledby": "schedules-title" },
    el("h2", { id: "schedules-title" }, "Schedules"), body, status);
  const run = (method, path, request, done) => async () => {
    status.replaceChildren();
    try { await api(method, path, request); status.replaceChildren(el("span", { class: "notice" }, done)); await load(); }
    catch (error) { status.replaceChildren(errorLine(error)); }
  };
  async function load() {
    const { schedules } = await api("GET", `/v1/agents/${agentId}/schedules`);
    body.replaceChildren(table("schedules-table", ["When", "Input", "State", "Next", "Fired", ""],
      schedules.map((s) => {
        const path = `/v1/agents/${agentId}/schedules/${s.id}`;
        const slots = s.cron ? `${s.cron} (${s.timezone})` : `every ${s.every}`;
        const toggle = s.state === "paused"
          ? el("button", { type: "button", "aria-label": `Resume ${slots}`, onclick: run("PATCH", path, { paused: false }, "resumed") }, "Resume")
          : el("button", { type: "button", "aria-label": `Pause ${slots}`, disabled: s.state === "ended", onclick: run("PATCH", path, { paused: true }, "paused") }, "Pause");
        const remove = el("button", { type: "button", class: "danger", "aria-label": `Delete ${slots}`, onclick: run("DELETE", path, undefined, "deleted") }, "Delete");
        const content = typeof s.input.content === "string" ? s.input.content : JSON.stringify(s.input.content);
        return [slots, `${s.input.mode}: ${content.slice(0, 80)}`, s.state, when(s.next_fire_at), s.fire_count,
          el("span", { class: "toolbar" }, toggle, remove)];
      })));
    box.hidden = schedules.length === 0;
  }
  return { box, load };
}

async function agentPage(id, render) {
  await loadProject();
  let agent = await api("GET", `/v1/agents/${id}`);
  const name = agentName(agent.config?.metadata);
  const stateLine = el("p", { id: "agent-state" });
  const lastTurnLine = el("p", { id: "last-turn" });
  const usageLine = el("p", { id: "usage-total", class: "meta" });
  const retryStatus = el("span", { role: "status", id: "retry-status" });
  let lastInput = null;
  const retry = el("button", { type: "button", id: "retry", hidden: true, onclick: async () => {
    if (lastInput === null) return;
    retryStatus.replaceChildren();
    try {
      await api("POST", `/v1/agents/${id}/inputs`, { content: await resendable(id, lastInput) }, { "Idempotency-Key": crypto.randomUUID() });
      retryStatus.replaceChildren(el("span", { class: "notice" }, "sent again"));
    } catch (error) { retryStatus.replaceChildren(errorLine(error)); }
  } }, "Retry the last input");
  const cancel = el("button", { type: "button", id: "cancel" }, "Cancel turn");
  const archive = el("button", { type: "button", id: "archive" }, "Archive");
  const setAgent = (a) => {
    agent = a;
    const shown = standing(a);
    stateLine.textContent = `state: ${a.state}${a.turn_open ? " · turn open" : ""}${shown !== a.state ? ` · ${shown}` : ""}`;
    stateLine.classList.toggle("failed", shown !== a.state);
    const turn = a.last_turn;
    if (turn) {
      const ended = turn.ended_at ? ` · ${duration(new Date(turn.ended_at) - new Date(turn.started_at))}` : "";
      const error = turn.error ? ` (${turn.error.type}: ${turn.error.message})` : "";
      lastTurnLine.textContent = `Last turn ${turn.turn}: ${turn.outcome === "limit" ? "stopped at a limit" : turn.outcome ?? "running"}${error}${ended} · ${usageText(turn.usage)}`;
      lastTurnLine.classList.toggle("failed", turn.outcome === "failed" || turn.outcome === "limit");
    } else lastTurnLine.textContent = "No turn yet.";
    retry.hidden = !(turn && (turn.outcome === "failed" || turn.outcome === "limit") && a.state === "idle");
    // What each action can do now: cancel ends an open turn, archive
    // takes an idle agent.
    cancel.disabled = !a.turn_open;
    archive.disabled = a.state !== "idle";
  };
  setAgent(agent);
  const configView = el("div", { id: "config" }, folded("config", maskSecrets(agent.config)));
  const timeline = turnTimeline(id);
  // New events (not the history the stream replays on open) are announced
  // here, one short line each.
  const announcer = el("div", { id: "announcer", class: "visually-hidden", "aria-live": "polite" });
  const historyUntil = agent.last_event_seq;
  const lateJoin = el("p", { class: "meta late-join", hidden: true }, "Opened mid-answer: the text before this point shows when the answer is saved.");
  const live = el("article", { class: "card live", id: "live-text", hidden: true }, el("h3", {}, "Answer (streaming)"), lateJoin, el("div", { class: "delta-text" }));
  const streamStatus = el("span", { id: "stream-status", class: "meta" });
  const jump = el("a", { href: "#", id: "jump-latest", onclick: (e) => { e.preventDefault(); (live.hidden ? timeline.root : live).scrollIntoView({ block: "end" }); } }, "Jump to latest");
  const pending = pendingForms(id, () => { pending.load().catch(() => {}); });
  const backlog = backlogBox(id);
  const schedules = schedulesBox(id);

  let usageLoads = 0;
  const refreshUsage = () => {
    const mine = ++usageLoads;
    api("GET", `/v1/agents/${id}/usage`).then((usage) => {
      if (mine !== usageLoads) return;
      timeline.setUsage(usage);
      usageLine.textContent = `Usage, all turns: ${usageText(usage.usage)}`;
    }).catch(() => {});
  };
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
  // The streamed text renders as markdown (line breaks and all), at most
  // once a frame however fast deltas come. A page opened while a turn was
  // under way may have missed the start of the first answer it sees: it
  // says so until the saved answer shows the whole text.
  let turnOpen = false, liveEpoch = null, savedEpoch = -1, liveText = "", drawing = false;
  let missedStart = agent.turn_open;
  const liveView = live.querySelector(".delta-text");
  const drawLive = () => {
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => { drawing = false; liveView.replaceChildren(markdown(liveText)); });
  };
  const clearLive = () => { live.hidden = true; lateJoin.hidden = true; liveText = ""; liveView.replaceChildren(); };
  const stream = streamEvents({
    url: `/v1/agents/${id}/stream`, key: sessionStorage.getItem(KEY), afterSeq: 0,
    onStatus: (s) => { streamStatus.textContent = `stream: ${s}`; },
    onOutput: (piece) => timeline.output(piece),
    onDelta: (delta) => {
      if (!turnOpen || delta.epoch <= savedEpoch) return;
      if (delta.epoch !== liveEpoch) {
        lateJoin.hidden = !(missedStart && liveEpoch === null);
        liveEpoch = delta.epoch;
        liveText = "";
      }
      live.hidden = false;
      liveText += delta.text ?? "";
      drawLive();
    },
    onEvent: (event) => {
      if (event.type === "turn.started") turnOpen = true;
      else if (/^turn\.(completed|failed|cancelled)$/.test(event.type)) turnOpen = false;
      if (event.seq > historyUntil) missedStart = false;
      // A cancel or interrupt ends the call unsaved: what it had streamed
      // stays on the page, marked as such.
      if ((event.type === "turn.cancelled" || event.type === "model.interrupted") && !live.hidden && liveText) {
        timeline.note(el("article", { class: "card partial", "data-epoch": liveEpoch },
          el("h3", {}, `Partial answer, ${event.type === "turn.cancelled" ? "cancelled" : "interrupted"} (not saved)`),
          el("div", { class: "model-text" }, markdown(liveText))));
      }
      if (event.type === "model.response" || event.type === "model.retry" || event.type === "model.interrupted" || event.type.startsWith("turn.")) {
        if (liveEpoch !== null) savedEpoch = Math.max(savedEpoch, liveEpoch);
        clearLive();
      }
      if (event.type === "input.received") lastInput = event.data?.content ?? null;
      timeline.add(event);
      if (event.seq > historyUntil) announcer.textContent = `${EVENT_LABELS[event.type] ?? event.type} (#${event.seq})`;
      if (/^turn\.(completed|failed|cancelled)$/.test(event.type) && event.seq > historyUntil) refreshUsage();
      if (/^(approval|question|tool_call|turn)\./.test(event.type)) pending.load().catch(() => {});
      if (/^(input|turn)\./.test(event.type)) backlog.load().catch(() => {});
      if (/^schedule\./.test(event.type)) schedules.load().catch(() => {});
      refreshAgent();
    },
  });

  const inputText = el("textarea", { id: "input-text", "aria-label": "Message", required: true });
  // The steering mode (docs/api.md): steer joins the turn, queue waits for
  // it to end, interrupt aborts the model call in flight. Each message
  // starts from steer again: an interrupt is a choice for one message.
  const inputMode = el("select", { id: "input-mode", "aria-label": "Mode", "aria-describedby": "mode-help" },
    ...["steer", "queue", "interrupt"].map((mode) => el("option", { value: mode }, mode)));
  const modeHelp = el("p", { id: "mode-help", class: "meta" },
    "steer: joins the turn under way · queue: waits for it to end · interrupt: stops the model call in flight and answers this");
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
      if (draft === sending) { draft = null; inputText.value = ""; inputMode.value = "steer"; }
      inputStatus.replaceChildren(el("span", { class: "notice" }, "sent"));
    } catch (error) { inputStatus.replaceChildren(errorLine(error)); }
  } }, el("h3", {}, "Send an input"), inputText, inputMode, modeHelp, el("button", { type: "submit", class: "primary", id: "send" }, "Send"), inputStatus);

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
  // Cancel and archive ask first: a turn cancelled or an agent archived
  // cannot be taken back. The question replaces nothing; "Keep" closes it.
  const confirmBox = el("div", { class: "toolbar confirm", id: "confirm", role: "group", "aria-label": "Confirm", hidden: true });
  const ask = (question, yesId, yesLabel, action) => () => {
    const no = el("button", { type: "button", id: "confirm-keep", onclick: () => { confirmBox.hidden = true; } }, "Keep");
    const yes = el("button", { type: "button", class: "danger", id: yesId, onclick: async () => { confirmBox.hidden = true; await action(); } }, yesLabel);
    confirmBox.replaceChildren(el("span", {}, question), yes, no);
    confirmBox.hidden = false;
    yes.focus();
  };
  cancel.addEventListener("click", ask("Cancel the turn under way? Waiting calls are cancelled too.", "confirm-cancel", "Yes, cancel the turn",
    act(`/v1/agents/${id}/cancel`, (r) => `cancel: ${r.status}`)));
  archive.addEventListener("click", ask("Archive this agent? It will take no more inputs.", "confirm-archive", "Yes, archive",
    act(`/v1/agents/${id}/archive`, () => "archived")));
  const controls = el("div", { class: "toolbar" }, cancel, archive, retry, retryStatus, actionStatus);

  const forkedFrom = agent.forked_from
    ? el("p", { id: "forked-from" }, "Forked from ", link(agent.forked_from.agent_id), ` at event #${agent.forked_from.seq}`)
    : null;
  const replays = replaysBox(id);
  if (!render(el("h1", {}, `Agent ${id}`), name ? el("p", { class: "agent-name" }, name) : null, forkedFrom, stateLine, lastTurnLine, usageLine,
    streamStatus, controls, confirmBox, configView, pending.box, backlog.box, schedules.box,
    el("div", { class: "timeline-head" }, el("h2", {}, "Timeline"), jump), timeline.root, live, announcer,
    el("div", { class: "actions" }, sendForm, patchForm), replays.box)) {
    stream.stop();
    timeline.stop();
    return;
  }
  pending.load().catch(() => {});
  backlog.load().catch(() => {});
  schedules.load().catch(() => {});
  replays.load().catch(() => {});
  refreshUsage();
  stopCurrent = () => { stream.stop(); timeline.stop(); };
}

// ---- usage -----------------------------------------------------------------

// The project's usage by day and model (GET /v1/usage), with each model's
// total over the period.
async function usagePage(params, render) {
  await loadProject();
  const days = params.get("days") ?? "30";
  const usage = await api("GET", `/v1/usage?days=${encodeURIComponent(days)}`);
  const byModel = new Map();
  for (const row of usage.days) {
    const key = `${row.provider} ${row.model}`;
    const sum = byModel.get(key) ?? { steps: 0, input_tokens: 0, output_tokens: 0, cost_usd: null };
    sum.steps += row.model_steps;
    sum.input_tokens += row.usage.input_tokens;
    sum.output_tokens += row.usage.output_tokens;
    if (row.usage.cost_usd !== null) sum.cost_usd = (sum.cost_usd ?? 0) + row.usage.cost_usd;
    byModel.set(key, sum);
  }
  const daysSelect = el("select", { id: "usage-days", "aria-label": "Period", onchange: () => { location.hash = `#/usage?days=${daysSelect.value}`; } },
    ["7", "30", "90", "366"].map((d) => el("option", { value: d, selected: d === days }, `last ${d} days`)));
  render(el("h1", {}, "Usage"), el("div", { class: "toolbar" }, daysSelect),
    el("p", { id: "usage-sum" }, `Since ${usage.since}: ${usageText(usage.usage)}`),
    el("h2", {}, "By model"), table("usage-models", ["Model", "Model calls", "Tokens and cost"],
      [...byModel].map(([model, sum]) => [model, sum.steps, usageText(sum)])),
    el("h2", {}, "By day"), table("usage-days-table", ["Day", "Model", "Model calls", "Tokens and cost"],
      usage.days.map((row) => [row.day, `${row.provider} ${row.model}`, row.model_steps, usageText(row.usage)])),
    usage.days.length === 0 ? el("p", {}, "No model calls in this period.") : null);
}

// ---- operations ------------------------------------------------------------

async function operationsPage(render) {
  const nodes = await operationsNodes();
  if (!render(...nodes)) return;
  stopCurrent = keepFresh(nodes, operationsNodes);
}

async function operationsNodes() {
  await loadProject();
  const ops = await api("GET", "/v1/operations");
  return [el("h1", {}, "Operations"),
    el("h2", {}, "Queue depth"), counts(ops.agents_by_state),
    el("h2", {}, "Workers"), table("workers", ["Worker", "Agents held", "Soonest lease expiry", "Agents"],
      ops.workers.map((w) => [w.worker, w.agents_held, when(w.soonest_lease_expiry), el("ul", { class: "agent-ids" }, w.agents.map((a) => el("li", {}, link(a))))])),
    el("h2", {}, "Stuck agents"), table("stuck", ["Agent", "State", "Reason", "Since"],
      ops.stuck_agents.map((s) => [link(s.agent_id), s.state, s.reason, when(s.since)])),
    el("h2", {}, "Webhook endpoints"), table("webhooks", ["URL", "Pending", "Due", "Oldest due", "In flight", "Failed", "Recent failures"],
      ops.webhooks.map((w) => [w.url, w.pending, w.due, when(w.oldest_due_at), w.in_flight, w.failed,
        el("ul", {}, w.recent_failures.map((f) => el("li", {},
          `${f.event_type} (${f.status}, ${f.attempts} attempt${f.attempts === 1 ? "" : "s"}): ${[f.last_status_code && `HTTP ${f.last_status_code}`, f.last_error].filter(Boolean).join(" ")}`)))])),
    el("h2", {}, "Machines"), table("machines", ["Machine", "Online", "Last heartbeat", "Queued", "Running commands"],
      ops.machines.map((m) => [m.name, m.online ? "online" : "offline", when(m.last_heartbeat_at), m.queued,
        el("ul", {}, m.running.map((c) => el("li", {}, el("code", {}, c.command), " · ", link(c.agent_id), ` · since ${when(c.accepted_at)}`)))]))];
}

// ---- routing ---------------------------------------------------------------

async function route() {
  const mine = ++navigation;
  const render = showFor(mine);
  if (!sessionStorage.getItem(KEY)) { signIn(); return; }
  const hash = location.hash.replace(/^#/, "") || "/inbox";
  const [path, queryString] = hash.split("?");
  const params = new URLSearchParams(queryString ?? "");
  try {
    const agentMatch = path.match(/^\/agents\/([0-9a-f-]{36})$/i);
    const replayMatch = path.match(/^\/replays\/([0-9a-f-]{36})$/i);
    if (agentMatch) await agentPage(agentMatch[1], render);
    else if (replayMatch) await replayPage(replayMatch[1], render);
    else if (path === "/operations") await operationsPage(render);
    else if (path === "/agents") await agentsPage(params, render);
    else if (path === "/usage") await usagePage(params, render);
    else await inboxPage(params, render);
    if (mine === navigation) main.focus({ preventScroll: true });
  } catch (error) {
    if (mine !== navigation) return;
    if (error.status === 401) { sessionStorage.removeItem(KEY); signIn(error.message); return; }
    render(el("h1", {}, "Error"), errorLine(error));
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  // The address stays: signing in again returns to the same page.
  sessionStorage.removeItem(KEY);
  signIn("Signed out.");
});
window.addEventListener("hashchange", route);
route();
