// `run` and `textStream` against a real Holdfast (see ./stack.ts): one call
// from a message to its answer, custom tools served meanwhile, through a
// worker SIGKILL; handler mistakes end the call with an error result the
// model sees.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ConflictError, Holdfast, TurnFailedError, type Event, type TextChunk, type ToolHandler } from "../src/index.js";
import { Stack } from "./stack.js";

const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

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
const lookupTool = { type: "custom" as const, name: "lookup", input_schema: { type: "object" } };
const order = { order: 1001, status: "shipped" };
const lookup: ToolHandler = (input: { order: number }) => ({ order: input.order, status: "shipped" });

/** A directive for the fake model (tests/src/bin/holdfast-test-stack.rs). */
function directive(d: { say?: string; call?: Array<{ name: string; input: unknown }>; trickle_ms?: number }) {
  return JSON.stringify(d);
}

const callsLookup = (extra: { say?: string; trickle_ms?: number } = {}) =>
  directive({ call: [{ name: "lookup", input: { order: 1001 } }], ...extra });

async function allEvents(agentId: string): Promise<Event[]> {
  const events: Event[] = [];
  for (;;) {
    const page = await client.listEvents(agentId, { after: events.at(-1)?.seq ?? 0, limit: 1000 });
    events.push(...page.events);
    if (!page.has_more) return events;
  }
}

test("run sends once, serves the tool and returns the answer; the same key again replays it", async () => {
  const agent = await client.agents.create({ model, tools: [lookupTool] });
  const runs: string[] = [];
  const counted: ToolHandler = (input, call) => {
    runs.push(call.id);
    return lookup(input, call);
  };
  const answer = await client.run(agent.id, callsLookup(), { tools: { lookup: counted }, idempotencyKey: "run-ts-1" });
  expect(answer.text).toBe(`done: ${JSON.stringify(order)}`);
  expect(answer.message).toEqual([{ type: "text", text: answer.text }]);
  expect(answer.event.type).toBe("turn.completed");
  expect(answer.replayed).toBe(false);
  const again = await client.run(agent.id, callsLookup(), { tools: { lookup: counted }, idempotencyKey: "run-ts-1" });
  expect(again.replayed).toBe(true);
  expect(again.text).toBe(answer.text);
  expect(runs).toHaveLength(1);
  const events = await allEvents(agent.id);
  expect(events.filter((e) => e.type === "input.received")).toHaveLength(1);
});

test("run waits for the turn of its own input behind an open one", async () => {
  const agent = await client.agents.create({ model });
  await client.send(agent.id, directive({ say: "the first turn's slow answer", trickle_ms: 100 }));
  expect((await client.run(agent.id, "second")).text).toBe("echo: second");
});

test("concurrent runs on one agent each get the answer to their own input", async () => {
  const agent = await client.agents.create({ model });
  await client.send(agent.id, directive({ say: "a slow first turn", trickle_ms: 50 }));
  const answers = await Promise.all([0, 1, 2, 3, 4].map((i) => client.run(agent.id, `message ${i}`)));
  expect(answers.map((a) => a.text)).toEqual([0, 1, 2, 3, 4].map((i) => `echo: message ${i}`));
});

test("a cancelled turn throws TurnFailedError with the event", async () => {
  const agent = await client.agents.create({ model });
  const stream = client.textStream(agent.id, directive({ say: "an answer to cancel halfway", trickle_ms: 200 }));
  const failed = await (async () => {
    for await (const _ of stream) await client.agents.cancel(agent.id);
  })().catch((e) => e);
  expect(failed).toBeInstanceOf(TurnFailedError);
  expect(failed.event.type).toBe("turn.cancelled");
});

test("textStream marks the restart after a worker SIGKILL, and run's answer comes once", async () => {
  const agent = await client.agents.create({ model });
  const words = Array.from({ length: 12 }, (_, i) => `word${i}`).join(" ");
  const stream = client.textStream(agent.id, directive({ say: words, trickle_ms: 100 }));
  const chunks: TextChunk[] = [];
  let shown: string[] = [];
  let killed = false;
  for await (const chunk of stream) {
    chunks.push(chunk);
    // What a terminal shows: a restart voids the text of the call so far.
    if (chunk.restart) shown = [];
    shown.push(chunk.text);
    if (!killed) {
      expect((await stack.command(`kill-lease-holder ${agent.id}`)).killed).toBeDefined();
      await stack.command("start-worker");
      killed = true;
    }
  }
  expect(stream.result?.text).toBe(words);
  expect(chunks.some((c) => c.restart)).toBe(true);
  expect(shown.join("")).toBe(words);
  const events = await allEvents(agent.id);
  expect(events.filter((e) => e.type === "turn.completed")).toHaveLength(1);
  expect(events.filter((e) => e.type === "input.received")).toHaveLength(1);
});

const mistakes: Array<[string, ToolHandler | undefined, string]> = [
  [
    "throws",
    () => {
      throw new RangeError("no such order");
    },
    "threw RangeError: no such order",
  ],
  ["returns a BigInt", () => ({ total: 10n }), "not JSON"],
  ["returns a function", () => () => 1, "not JSON"],
  ["has no handler", undefined, "no handler for tool"],
];

for (const [what, handler, why] of mistakes) {
  test(`a handler that ${what} ends the call with an error result within a second`, async () => {
    const agent = await client.agents.create({ model, tools: [lookupTool] });
    const logged: unknown[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => logged.push(args);
    let answer;
    try {
      answer = await client.run(agent.id, callsLookup(), { tools: handler ? { lookup: handler } : {} });
    } finally {
      console.error = original;
    }
    const completed = (await allEvents(agent.id)).filter((e) => e.type === "tool_call.completed");
    expect(completed).toHaveLength(1);
    const data = completed[0]!.data as { is_error: boolean; output: { error: string } };
    expect(data.is_error).toBe(true);
    expect(data.output.error).toContain(why);
    expect(answer.text).toContain(why);
    expect(JSON.stringify(logged, (_k, v) => (v instanceof Error ? v.message : v))).toContain(why);
    const calls = await client.json<{ tool_calls: Array<{ created_at: string; completed_at: string }> }>(
      "GET",
      `/v1/agents/${agent.id}/tool-calls`,
    );
    const call = calls.tool_calls[0]!;
    expect(Date.parse(call.completed_at) - Date.parse(call.created_at)).toBeLessThan(1000);
  });
}

test("a sync handler returning a promise is awaited", async () => {
  const agent = await client.agents.create({ model, tools: [lookupTool] });
  const answer = await client.run(agent.id, callsLookup(), {
    tools: { lookup: (input: { order: number }) => Promise.resolve({ order: input.order, status: "shipped" }) },
  });
  expect(answer.text).toBe(`done: ${JSON.stringify(order)}`);
});

test("an image result posted again is the same result, not a conflict", async () => {
  const agent = await client.agents.create({ model, tools: [lookupTool] });
  await client.send(agent.id, callsLookup());
  let calls = await client.pendingToolCalls(agent.id);
  while (calls.length === 0) calls = await client.pendingToolCalls(agent.id);
  // A 1x1 PNG.
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  const output = [
    { type: "text", text: "the label" },
    { type: "image", source: { type: "base64", media_type: "image/png", data: png } },
  ];
  const first = await client.submitToolResult(calls[0]!.id, output);
  expect(JSON.stringify(first.output)).toContain('"attachment"');
  const again = await client.submitToolResult(calls[0]!.id, output);
  expect(again.id).toBe(calls[0]!.id);
});

// Two 1x1 PNGs: the same size and media type, other pixels.
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const otherPng = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const withImage = (text: string, data: string) => [
  { type: "text", text },
  { type: "image", source: { type: "base64", media_type: "image/png", data } },
];

test("content read back from the timeline is the content sent, and not another image", async () => {
  const agent = await client.agents.create({ model, tools: [lookupTool] });
  await client.send(agent.id, withImage(callsLookup(), png));
  let calls = await client.pendingToolCalls(agent.id);
  while (calls.length === 0) calls = await client.pendingToolCalls(agent.id);
  const output = withImage("the label", png);
  await client.submitToolResult(calls[0]!.id, output);
  // A different image of the same size and type is another result: a conflict.
  await expect(client.submitToolResult(calls[0]!.id, withImage("the label", otherPng))).rejects.toBeInstanceOf(
    ConflictError,
  );

  const { events } = await client.listEvents(agent.id);
  const received = events.find((e) => e.type === "input.received");
  const completed = events.find((e) => e.type === "tool_call.completed");
  if (received?.type !== "input.received" || completed?.type !== "tool_call.completed") throw new Error("events missing");
  const stored = completed.data.output as Array<{ source: { type: string; attachment_id: string } }>;
  expect(stored[1]!.source.type).toBe("attachment");
  expect(await client.sameContent(agent.id, stored, output)).toBe(true);
  expect(await client.sameContent(agent.id, received.data.content, withImage(callsLookup(), png))).toBe(true);
  expect(await client.sameContent(agent.id, stored, withImage("the label", otherPng))).toBe(false);
  expect(await client.sameContent(agent.id, stored, withImage("another label", png))).toBe(false);
  expect(await client.attachment(agent.id, stored[1]!.source.attachment_id)).toEqual(
    new Uint8Array(Buffer.from(png, "base64")),
  );
});

test("the README quickstart, copied out of the README, prints the answer", async () => {
  const readme = readFileSync(path.join(sdk, "README.md"), "utf8");
  const code = /## Quickstart\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme);
  expect(code).not.toBeNull();
  if (!existsSync(path.join(sdk, "dist", "esm", "index.js"))) execFileSync("npm", ["run", "build"], { cwd: sdk });
  const project = mkdtempSync(path.join(tmpdir(), "holdfast-quickstart-"));
  try {
    mkdirSync(path.join(project, "node_modules"));
    symlinkSync(sdk, path.join(project, "node_modules", "holdfast-sdk"));
    // The quickstart is TypeScript without annotations: valid as an ES module.
    writeFileSync(path.join(project, "quickstart.mjs"), code![1]!);
    const printed = execFileSync(process.execPath, ["quickstart.mjs"], {
      cwd: project,
      env: { HOLDFAST_URL: stack.info.url, HOLDFAST_API_KEY: stack.info.key, PATH: process.env.PATH },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(printed).toBe("echo: Where is order 1001?\n");
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
