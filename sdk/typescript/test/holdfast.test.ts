// Against a real Holdfast (real Postgres, real `holdfast` processes, the
// fake model): see ./stack.ts.

import http from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import {
  ConflictError,
  Holdfast,
  NotFoundError,
  InvalidRequestError,
  ToolServer,
  WebhookVerificationError,
  serveTools,
  verifyWebhook,
  type Event,
  type StreamItem,
} from "../src/index.js";
import { runBackend } from "../../../examples/typescript/tool-backend.js";
import { Stack, waitUntil } from "./stack.js";

let stack: Stack;
let client: Holdfast;

beforeAll(async () => {
  stack = await Stack.start();
  client = new Holdfast({ baseUrl: stack.info.url, apiKey: stack.info.key, retry: { baseDelayMs: 100 } });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

const model = { provider: "anthropic" as const, name: "claude-test" };
const lookup = { type: "custom" as const, name: "lookup", input_schema: { type: "object" } };

/** A directive for the fake model (tests/src/bin/holdfast-test-stack.rs). */
function directive(d: {
  say?: string;
  call?: Array<{ name: string; input: unknown }>;
  think?: string;
  trickle_ms?: number;
}) {
  return JSON.stringify(d);
}

async function allEvents(agentId: string): Promise<Event[]> {
  const events: Event[] = [];
  for (;;) {
    const page = await client.listEvents(agentId, { after: events.at(-1)?.seq ?? 0, limit: 1000 });
    events.push(...page.events);
    if (!page.has_more) return events;
  }
}

async function waitForEvent(agentId: string, type: string, count = 1): Promise<Event[]> {
  let events: Event[] = [];
  await waitUntil(`${count} ${type} on ${agentId}`, async () => {
    events = await allEvents(agentId);
    return events.filter((e) => e.type === type).length >= count;
  });
  return events;
}

describe("agents", () => {
  test("create, get, list every page, update, cancel, archive", async () => {
    const created = [];
    for (let i = 0; i < 5; i++) created.push(await client.agents.create({ model, metadata: { n: i } }));
    expect((await client.agents.get(created[0]!.id)).id).toBe(created[0]!.id);
    const listed: string[] = [];
    for await (const agent of client.agents.list({ pageSize: 2 })) listed.push(agent.id);
    for (const agent of created) expect(listed).toContain(agent.id);
    const updated = await client.agents.update(created[0]!.id, { system: "Be brief." });
    expect(updated.config.system).toBe("Be brief.");
    await client.send(created[1]!.id, directive({ say: "a long slow answer to cancel", trickle_ms: 200 }));
    expect(["cancelled", "requested"]).toContain((await client.agents.cancel(created[1]!.id)).status);
    expect((await client.agents.archive(created[2]!.id)).state).toBe("archived");
  });

  test("search finds an agent by a word of its answer", async () => {
    const agent = await client.agents.create({ model });
    await client.run(agent.id, directive({ say: "The cormorant ledger balances." }));
    const found: string[] = [];
    for await (const a of client.agents.search("cormorant")) found.push(a.id);
    expect(found).toEqual([agent.id]);
  });

  test("errors are typed by their type, with the field", async () => {
    await expect(client.agents.get("00000000-0000-0000-0000-000000000000")).rejects.toBeInstanceOf(NotFoundError);
    const invalid = await client.agents.create({ model: { ...model, max_tokens: 0 } }).catch((e) => e);
    expect(invalid).toBeInstanceOf(InvalidRequestError);
    expect(invalid.field).toBe("model.max_tokens");
  });
});

describe("forks and replays", () => {
  test("fork a finished turn, replay it, wait for the report", async () => {
    const agent = await client.agents.create({ model });
    await client.send(agent.id, directive({ say: "forty-two" }));
    await waitForEvent(agent.id, "turn.completed");
    const fork = await client.agents.fork(agent.id, { at: { turn: 1 }, config: { system: "Be brief." } });
    expect(fork.forked_from?.agent_id).toBe(agent.id);
    expect(fork.state).toBe("idle");
    expect(fork.config.system).toBe("Be brief.");

    const started = await client.replays.create(agent.id, { config: { system: "Be brief." } });
    const report = await client.replays.waitForReport(started.id, { intervalMs: 100, timeoutMs: 60_000 });
    expect(report.status).toBe("completed");
    expect(report.turns[0]!.replay.answer).toBe("forty-two");
    expect(report.turns[0]!.answer_equal).toBe(true);
    expect((await client.replays.list(agent.id)).map((r) => r.id)).toEqual([started.id]);
    const refused = await client.agents.fork(agent.id, { at: { seq: 10_000 } }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidRequestError);
    expect((refused as InvalidRequestError).field).toBe("at.seq");
    await client.agents.update(agent.id, { system: "Be long." });
    expect((await client.agents.fork(agent.id, { version: 1 })).config.system ?? null).toBeNull();
    const noVersion = await client.replays.create(agent.id, { version: 9 }).catch((e: unknown) => e);
    expect(noVersion).toBeInstanceOf(InvalidRequestError);
    expect((noVersion as InvalidRequestError).field).toBe("version");
  });
});

describe("send", () => {
  test("a send retried after a forced connection drop gives one input", async () => {
    const agent = await client.agents.create({ model });
    const upstream = new URL(stack.info.url);
    const keys: string[] = [];
    let dropped = false;
    // Forwards to the API; the first send's answer is thrown away and its
    // connection destroyed, after the API has recorded the input.
    const proxy = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        if (req.url?.endsWith("/inputs")) keys.push(String(req.headers["idempotency-key"]));
        const forward = http.request(
          { host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers },
          (answer) => {
            if (req.url?.endsWith("/inputs") && !dropped) {
              dropped = true;
              answer.resume();
              answer.on("end", () => req.socket.destroy());
              return;
            }
            res.writeHead(answer.statusCode!, answer.headers);
            answer.pipe(res);
          },
        );
        forward.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const port = (proxy.address() as { port: number }).port;
    try {
      const viaProxy = new Holdfast({ baseUrl: `http://127.0.0.1:${port}`, apiKey: stack.info.key });
      const sent = await viaProxy.send(agent.id, "hello once");
      expect(dropped).toBe(true);
      expect(sent.replayed).toBe(true);
      expect(keys).toHaveLength(2);
      expect(keys[0]).toBe(keys[1]);
      const events = await allEvents(agent.id);
      expect(events.filter((e) => e.type === "input.received")).toHaveLength(1);
    } finally {
      proxy.closeAllConnections();
      proxy.close();
    }
  });
});

describe("stream", () => {
  test("a stream across an API restart yields each saved event once, deltas separately", async () => {
    const agent = await client.agents.create({ model });
    const controller = new AbortController();
    const items: StreamItem[] = [];
    let restarted: Promise<unknown> | undefined;
    const reading = (async () => {
      for await (const item of client.stream(agent.id, { signal: controller.signal })) {
        items.push(item);
        if (item.type === "delta" && !restarted) restarted = stack.command("restart-api");
        if (item.type === "event" && item.event.type === "turn.completed") break;
      }
    })();
    await client.send(agent.id, directive({ say: "one two three four five six seven eight nine ten", trickle_ms: 150 }));
    await reading;
    await restarted;
    controller.abort();
    expect(restarted).toBeDefined();
    const seqs = items.flatMap((i) => (i.type === "event" ? [i.event.seq] : []));
    const saved = (await allEvents(agent.id)).map((e) => e.seq);
    expect(seqs).toEqual(saved);
    expect(items.some((i) => i.type === "delta")).toBe(true);
  }, 60_000);

  test("a stream delivers the thinking deltas of a model call", async () => {
    const agent = await client.agents.create({ model });
    await client.send(agent.id, "hi");
    const thinking: string[] = [];
    let ended = 0;
    for await (const item of client.stream(agent.id)) {
      if (item.type === "thinking_delta") thinking.push(item.delta.text);
      if (item.type === "event" && item.event.type === "turn.completed") {
        ended += 1;
        if (ended === 2) break;
        // The stream is live now: the next call's deltas reach it.
        await client.send(agent.id, directive({ think: "Order 1001 left the depot on Monday.", say: "shipped" }));
      }
    }
    expect(thinking.join("")).toBe("Order 1001 left the depot on Monday.");
    const responses = (await allEvents(agent.id)).filter((e) => e.type === "model.response");
    const last = responses[responses.length - 1];
    if (last?.type !== "model.response") throw new Error("no model.response");
    expect(last.data.message[0]).toEqual({ type: "thinking", thinking: thinking.join(""), signature: "sig" });
  }, 60_000);

  test("pending calls are re-read after a reconnect", async () => {
    const agent = await client.agents.create({ model, tools: [lookup] });
    await client.send(agent.id, directive({ call: [{ name: "lookup", input: { order: 1 } }] }));
    const events = await waitForEvent(agent.id, "tool_call.created");
    const created = events.find((e) => e.type === "tool_call.created")!;
    const callId = (created.data as { id: string }).id;
    // From after the call's event: only the re-read can show it.
    const after = events.at(-1)!.seq;
    const controller = new AbortController();
    let seen = 0;
    for await (const item of client.stream(agent.id, { after, signal: controller.signal })) {
      if (item.type === "tool_call" && item.toolCall.id === callId) {
        seen += 1;
        if (seen === 1) await stack.command("restart-api");
        if (seen === 2) break;
      }
    }
    controller.abort();
    expect(seen).toBe(2);
  }, 60_000);
});

describe("409 semantics", () => {
  test("a tool result: the same output again is success, another output a ConflictError with the state", async () => {
    const agent = await client.agents.create({ model, tools: [lookup] });
    await client.send(agent.id, directive({ call: [{ name: "lookup", input: {} }] }));
    await waitUntil("a pending call", async () => (await client.pendingToolCalls(agent.id)).length > 0);
    const [call] = await client.pendingToolCalls(agent.id);
    const first = await client.submitToolResult(call!.id, { status: "shipped" });
    expect(first.status).toBe("completed");
    const again = await client.submitToolResult(call!.id, { status: "shipped" });
    expect(again.output).toEqual({ status: "shipped" });
    const other = await client.submitToolResult(call!.id, { status: "lost" }).catch((e) => e);
    expect(other).toBeInstanceOf(ConflictError);
    expect(other.status).toBe(409);
    expect(other.current.output).toEqual({ status: "shipped" });
  }, 60_000);

  test("approvals and questions: the decided state is success, the other a ConflictError", async () => {
    const agent = await client.agents.create({
      model,
      tools: [lookup, { type: "ask_user" }],
      approvals: { require_for: ["lookup"] },
    });
    await client.send(
      agent.id,
      directive({ call: [{ name: "lookup", input: {} }, { name: "ask_user", input: { question: "colour?" } }] }),
    );
    await waitUntil("a pending approval", async () => (await client.pendingApprovals(agent.id)).length > 0);
    await waitUntil("a pending question", async () => (await client.pendingQuestions(agent.id)).length > 0);
    const [approval] = await client.pendingApprovals(agent.id);
    const [question] = await client.pendingQuestions(agent.id);
    expect((await client.approve(approval!.id, { by: "alice" })).status).toBe("approved");
    expect((await client.approve(approval!.id, { by: "bob" })).status).toBe("approved");
    const denied = await client.deny(approval!.id, { by: "bob" }).catch((e) => e);
    expect(denied).toBeInstanceOf(ConflictError);
    expect(denied.current.status).toBe("approved");
    expect((await client.answer(question!.id, "blue", { by: "alice" })).answer).toBe("blue");
    expect((await client.answer(question!.id, "blue", { by: "bob" })).answer).toBe("blue");
    const red = await client.answer(question!.id, "red", { by: "bob" }).catch((e) => e);
    expect(red).toBeInstanceOf(ConflictError);
    expect(red.current.answer).toBe("blue");
  }, 60_000);
});

describe("schedules, backlog and config versions", () => {
  test("a schedule is created, listed, paused, resumed and deleted", async () => {
    const agent = await client.agents.create({ model });
    const created = await client.schedules.create(agent.id, {
      cron: "0 8 * * 1-5",
      timezone: "Europe/Berlin",
      input: { content: "summarise the overnight tickets" },
    });
    expect(created.state).toBe("active");
    expect(created.input.mode).toBe("queue");
    expect((await client.schedules.list(agent.id)).map((s) => s.id)).toEqual([created.id]);
    expect((await client.schedules.pause(agent.id, created.id)).state).toBe("paused");
    expect((await client.schedules.resume(agent.id, created.id)).next_fire_at).toBe(created.next_fire_at);
    const bad = await client.schedules.create(agent.id, { every: "500ms", input: { content: "x" } }).catch((e) => e);
    expect(bad).toBeInstanceOf(InvalidRequestError);
    expect(bad.field).toBe("every");
    await client.schedules.delete(agent.id, created.id);
    expect(await client.schedules.get(agent.id, created.id).catch((e) => e)).toBeInstanceOf(NotFoundError);
  }, 60_000);

  test("config changes are numbered versions and a queued input moves", async () => {
    const agent = await client.agents.create({ model, system: "one" });
    const updated = await client.agents.update(agent.id, { system: "two" }, { apply: "next_turn" });
    expect(updated.config_version).toBe(2);
    expect((await client.agents.versions(agent.id)).map((v) => v.version)).toEqual([1, 2]);
    expect((await client.agents.version(agent.id, 1)).config.system).toBe("one");
    const moved = await client.agents.updateInput("00000000-0000-0000-0000-000000000000", { position: 1 }).catch((e) => e);
    expect(moved).toBeInstanceOf(NotFoundError);
  }, 60_000);
});

describe("webhooks", () => {
  test("a real delivery verifies and a tampered one does not", async () => {
    const deliveries: Array<{ headers: http.IncomingHttpHeaders; body: string }> = [];
    const receiver = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        deliveries.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const port = (receiver.address() as { port: number }).port;
      const hook = await client.webhooks.create({ url: `http://127.0.0.1:${port}/hook`, events: ["input.received"] });
      const agent = await client.agents.create({ model });
      await client.send(agent.id, "hello hook");
      await waitUntil("a delivery for the agent", () => deliveries.some((d) => d.body.includes(agent.id)));
      const delivery = deliveries.find((d) => d.body.includes(agent.id))!;
      const event = verifyWebhook(delivery.headers, delivery.body, hook.secret);
      expect(event.type).toBe("input.received");
      expect(event.agent_id).toBe(agent.id);
      const tampered = delivery.body.replace("hello hook", "hello hack");
      expect(() => verifyWebhook(delivery.headers, tampered, hook.secret)).toThrow(WebhookVerificationError);
      await client.webhooks.delete(hook.id);
    } finally {
      receiver.close();
    }
  }, 60_000);
});

describe("serveTools", () => {
  test("a ToolServer fed by verified webhook deliveries answers the call once", async () => {
    const agent = await client.agents.create({ model, tools: [lookup] });
    const runs: string[] = [];
    const tools = new ToolServer(client, { lookup: (_input, call) => runs.push(call.id) && "looked up" });
    let secret = "";
    const seen = new Set<string>();
    const receiver = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        try {
          const event = verifyWebhook(req.headers, Buffer.concat(chunks).toString(), secret);
          res.writeHead(204).end();
          // At least once: dedupe by webhook-id, then do the work after answering.
          const id = String(req.headers["webhook-id"]);
          if (!seen.has(id) && event.agent_id === agent.id) {
            seen.add(id);
            void tools.handleEvent(event);
          }
        } catch {
          res.writeHead(400).end();
        }
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const port = (receiver.address() as { port: number }).port;
      const hook = await client.webhooks.create({ url: `http://127.0.0.1:${port}/hook`, events: ["tool_call.created"] });
      secret = hook.secret;
      await client.send(agent.id, directive({ call: [{ name: "lookup", input: {} }] }));
      const events = await waitForEvent(agent.id, "turn.completed");
      await tools.idle();
      expect(runs).toHaveLength(1);
      expect(events.filter((e) => e.type === "tool_call.completed")).toHaveLength(1);
      await client.webhooks.delete(hook.id);
    } finally {
      receiver.close();
    }
  });

  test("answers a custom tool call exactly once across a worker SIGKILL and an API restart", async () => {
    const agent = await client.agents.create({ model, tools: [lookup] });
    const runs: string[] = [];
    const controller = new AbortController();
    const serving = serveTools(
      client,
      agent.id,
      {
        lookup: async (input: { order: number }, call) => {
          runs.push(call.id);
          // Restart the API while the result is still to be posted.
          await stack.command("restart-api");
          return { order: input.order, status: "shipped" };
        },
      },
      { signal: controller.signal },
    );
    // Kill the worker while the model streams the call; another worker makes
    // the model call again.
    const watcher = new AbortController();
    const killed = (async () => {
      for await (const item of client.stream(agent.id, { signal: watcher.signal })) {
        if (item.type === "delta") return stack.command(`kill-lease-holder ${agent.id}`);
      }
    })();
    await client.send(
      agent.id,
      directive({
        say: "let me look that order up for you right now",
        call: [{ name: "lookup", input: { order: 1001 } }],
        trickle_ms: 150,
      }),
    );
    expect((await killed)?.killed).toBeDefined();
    watcher.abort();
    await stack.command("start-worker");
    const events = await waitForEvent(agent.id, "turn.completed");
    controller.abort();
    await serving;
    expect(runs).toHaveLength(1);
    const completed = events.filter((e) => e.type === "tool_call.completed");
    expect(completed).toHaveLength(1);
    expect((completed[0]!.data as { output: unknown }).output).toEqual({ order: 1001, status: "shipped" });
    const responses = events.filter((e) => e.type === "model.response");
    expect(JSON.stringify(responses.at(-1)!.data)).toContain("done:");
  }, 90_000);

  test("runs a call that needs approval only once it is approved", async () => {
    const agent = await client.agents.create({ model, tools: [lookup], approvals: { require_for: ["lookup"] } });
    const runs: string[] = [];
    const controller = new AbortController();
    const serving = serveTools(client, agent.id, { lookup: (_input, call) => runs.push(call.id) }, { signal: controller.signal });
    await client.send(agent.id, directive({ call: [{ name: "lookup", input: {} }] }));
    await waitUntil("a pending approval", async () => (await client.pendingApprovals(agent.id)).length > 0);
    expect(runs).toEqual([]);
    const [approval] = await client.pendingApprovals(agent.id);
    await client.approve(approval!.id, { by: "alice" });
    await waitForEvent(agent.id, "turn.completed");
    controller.abort();
    await serving;
    expect(runs).toEqual([approval!.tool_call_id]);
  }, 60_000);

  test("a ToolServer fed the same call twice (a replay, a webhook retry) runs it once", async () => {
    const agent = await client.agents.create({ model, tools: [lookup] });
    await client.send(agent.id, directive({ call: [{ name: "lookup", input: {} }] }));
    const [created] = (await waitForEvent(agent.id, "tool_call.created")).filter((e) => e.type === "tool_call.created");
    const [pending] = await client.pendingToolCalls(agent.id);
    let runs = 0;
    const server = new ToolServer(client, { lookup: () => ++runs });
    await server.handleEvent(created!);
    await server.handleEvent(created!);
    server.handle(pending!);
    await server.idle();
    expect(runs).toBe(1);
    expect(await client.pendingToolCalls(agent.id)).toEqual([]);
  }, 60_000);
});

describe("examples", () => {
  test("the custom-tool backend answers lookup_order and records the call in its ledger", async () => {
    const agent = await client.agents.create({
      model,
      tools: [{ type: "custom", name: "lookup_order", input_schema: { type: "object" } }],
    });
    const dir = mkdtempSync(path.join(tmpdir(), "holdfast-example-"));
    const controller = new AbortController();
    try {
      const ledger = path.join(dir, "ledger.jsonl");
      const serving = runBackend({ client, agentId: agent.id, ledger, signal: controller.signal });
      await client.send(agent.id, directive({ call: [{ name: "lookup_order", input: { order: 7 } }] }));
      const events = await waitForEvent(agent.id, "turn.completed");
      controller.abort();
      await serving;
      const completed = events.find((e) => e.type === "tool_call.completed")!;
      expect((completed.data as { output: unknown }).output).toEqual({ order: 7, status: "shipped", carrier: "DHL" });
      const lines = readFileSync(ledger, "utf8").trim().split("\n");
      expect(lines.map((l) => JSON.parse(l).id)).toEqual([(completed.data as { tool_call_id: string }).tool_call_id]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
