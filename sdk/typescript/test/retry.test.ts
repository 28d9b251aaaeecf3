// The retry policy, with a scripted fetch: what is retried, with which key,
// after how long; the errors when it gives up; settings from the
// environment; thinking deltas.

import { expect, test } from "vitest";
import { afterEach, vi } from "vitest";
import { APIConnectionError, APITimeoutError, Holdfast, HoldfastError, UnavailableError } from "../src/index.js";

const input = { id: "i1", agent_id: "a1", content: "hi", created_at: "2026-01-01T00:00:00Z" };

function scripted(answers: Array<() => Response>) {
  const seen: Array<{ key: string | null; at: number }> = [];
  const fetch = (async (_url: unknown, init?: RequestInit) => {
    seen.push({ key: new Headers(init?.headers).get("idempotency-key"), at: Date.now() });
    const next = answers.shift();
    if (!next) throw new Error("no more answers");
    return next();
  }) as typeof globalThis.fetch;
  return { seen, fetch };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
const busy = { error: { type: "unavailable", message: "busy" } };

test("429 and 503 are retried with the same key, honouring Retry-After", async () => {
  const { seen, fetch } = scripted([
    () => json(429, { error: { type: "rate_limited", message: "slow down" } }, { "retry-after": "1" }),
    () => {
      throw new TypeError("fetch failed");
    },
    () => json(503, busy),
    () => json(201, input, { "idempotent-replayed": "true" }),
  ]);
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 10 } });
  const sent = await client.send("a1", "hi");
  expect(sent.replayed).toBe(true);
  expect(seen).toHaveLength(4);
  expect(new Set(seen.map((s) => s.key)).size).toBe(1);
  expect(seen[0]!.key).toMatch(/^[0-9a-f-]{36}$/);
  expect(seen[1]!.at - seen[0]!.at).toBeGreaterThanOrEqual(990);
});

test("an own Idempotency-Key is used; retries stop after maxRetries with a typed error", async () => {
  const { seen, fetch } = scripted([() => json(503, busy), () => json(503, busy), () => json(503, busy)]);
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 1, maxRetries: 2 } });
  await expect(client.send("a1", "hi", { idempotencyKey: "msg-1" })).rejects.toBeInstanceOf(UnavailableError);
  expect(seen.map((s) => s.key)).toEqual(["msg-1", "msg-1", "msg-1"]);
});

test("creating an agent is not retried after a network error (it could create two)", async () => {
  const { seen, fetch } = scripted([
    () => {
      throw new TypeError("fetch failed");
    },
  ]);
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 1 } });
  await expect(client.agents.create({ model: { provider: "anthropic", name: "m" } })).rejects.toBeInstanceOf(
    APIConnectionError,
  );
  expect(seen).toHaveLength(1);
});

test("a try with no answer within timeoutMs counts as a network error and is retried", async () => {
  let tries = 0;
  const fetch = ((_url: unknown, init?: RequestInit) => {
    tries += 1;
    // Never answers; gives up only when the client's signal aborts.
    return new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
  }) as typeof globalThis.fetch;
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 1, maxRetries: 2, timeoutMs: 50 } });
  await expect(client.agents.get("a1")).rejects.toBeInstanceOf(APIConnectionError);
  expect(tries).toBe(3);
});

test("a stream that opens and ends at once is reopened with a growing backoff, not in a tight loop", async () => {
  let opens = 0;
  const fetch = (async (url: unknown) => {
    const path = new URL(String(url)).pathname;
    if (path.endsWith("/stream")) {
      opens += 1;
      return new Response("", { status: 200, headers: { "content-type": "text/event-stream" } });
    }
    const list = path.split("/").at(-1)!.replace("-", "_");
    return json(200, { [list]: [] });
  }) as typeof globalThis.fetch;
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 20 } });
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 1000);
  for await (const _ of client.stream("a1", { signal: controller.signal })) {
    // Nothing arrives.
  }
  // Full jitter doubling from 20 ms: about 7 opens in a second at most; a
  // tight loop would open hundreds.
  expect(opens).toBeGreaterThan(1);
  expect(opens).toBeLessThan(15);
});

test("502 and 504 are retried too", async () => {
  const { seen, fetch } = scripted([
    () => new Response("bad gateway", { status: 502 }),
    () => new Response("gateway timeout", { status: 504 }),
    () => json(201, input),
  ]);
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 1 } });
  await client.send("a1", "hi");
  expect(seen).toHaveLength(3);
  expect(new Set(seen.map((s) => s.key)).size).toBe(1);
});

test("retries stop at the budget; the connection error is a HoldfastError with the key and the cause", async () => {
  const refused = Object.assign(new TypeError("fetch failed"), {
    cause: new Error("connect ECONNREFUSED 127.0.0.1:8080"),
  });
  const { seen, fetch } = scripted(
    Array.from({ length: 1000 }, () => () => {
      throw refused;
    }),
  );
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { budgetMs: 500, baseDelayMs: 10, maxDelayMs: 50 } });
  const started = Date.now();
  const failed = await client.send("a1", "hi", { idempotencyKey: "msg-2" }).catch((e) => e);
  expect(Date.now() - started).toBeGreaterThan(300);
  expect(Date.now() - started).toBeLessThan(1500);
  expect(failed).toBeInstanceOf(HoldfastError);
  expect(failed).toBeInstanceOf(APIConnectionError);
  expect(failed.idempotencyKey).toBe("msg-2");
  expect(failed.message).toContain("ECONNREFUSED");
  expect(failed.message).toContain("msg-2");
  expect(failed.cause).toBe(refused);
  expect(seen.length).toBeGreaterThan(3);
});

test("the default budget outlasts an up restart", () => {
  const client = new Holdfast({ apiKey: "hf_x" });
  expect(client.retry.budgetMs).toBeGreaterThanOrEqual(60_000);
  expect(client.retry.maxRetries).toBe(Number.POSITIVE_INFINITY);
});

test("a try past timeoutMs, after every retry, is an APITimeoutError", async () => {
  const fetch = ((_url: unknown, init?: RequestInit) =>
    new Promise((_resolve, reject) =>
      init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)),
    )) as typeof globalThis.fetch;
  const client = new Holdfast({ apiKey: "hf_x", fetch, retry: { baseDelayMs: 1, maxRetries: 1, timeoutMs: 30 } });
  await expect(client.agents.get("a1")).rejects.toBeInstanceOf(APITimeoutError);
});

afterEach(() => {
  vi.unstubAllEnvs();
});

test("the key and URL come from the environment; a missing key says how to get one", () => {
  vi.stubEnv("HOLDFAST_API_KEY", "hf_from_env");
  vi.stubEnv("HOLDFAST_URL", "http://holdfast.example:9000/");
  expect(new Holdfast().baseUrl).toBe("http://holdfast.example:9000");
  vi.stubEnv("HOLDFAST_API_KEY", "");
  expect(() => new Holdfast()).toThrow(HoldfastError);
  expect(() => new Holdfast()).toThrow(/HOLDFAST_API_KEY.*holdfast up/);
});

test("thinking deltas are delivered", async () => {
  const fetch = (async (url: unknown) => {
    const path = new URL(String(url)).pathname;
    if (path.endsWith("/stream")) {
      return new Response('event: thinking_delta\ndata: {"text": "hmm", "epoch": 3}\n\n', {
        status: 200,
        headers: { "content-type": "text/event-stream" },
      });
    }
    const list = path.split("/").at(-1)!.replace("-", "_");
    return json(200, { [list]: [] });
  }) as typeof globalThis.fetch;
  const client = new Holdfast({ apiKey: "hf_x", fetch });
  for await (const item of client.stream("a1")) {
    expect(item).toEqual({ type: "thinking_delta", delta: { text: "hmm", epoch: 3 } });
    break;
  }
});
