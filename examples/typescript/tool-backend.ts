// A custom-tool backend: answers one agent's `lookup_order` calls.
//
//   HOLDFAST_URL=http://127.0.0.1:8080 HOLDFAST_API_KEY=hf_... HOLDFAST_AGENT=<agent id> \
//     npm start        # in examples/typescript, after npm install
//
// serveTools runs each call at most once in this process. Across restarts
// (or a second copy of this backend) a call can come again until its result
// is saved, so the side effect is keyed by the tool-call id in a ledger that
// survives restarts: a call already in it is answered from it, not redone.

import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { Holdfast, serveTools, type ToolCall } from "holdfast-sdk";

export interface BackendOptions {
  client: Holdfast;
  agentId: string;
  /** One JSON line per answered call: `{"id", "output"}`. */
  ledger: string;
  signal?: AbortSignal;
}

export function runBackend({ client, agentId, ledger, signal }: BackendOptions): Promise<void> {
  const answered = new Map<string, unknown>();
  if (existsSync(ledger)) {
    for (const line of readFileSync(ledger, "utf8").split("\n").filter(Boolean)) {
      const entry = JSON.parse(line) as { id: string; output: unknown };
      answered.set(entry.id, entry.output);
    }
  }
  const lookupOrder = async (input: { order?: number }, call: ToolCall) => {
    if (answered.has(call.id)) return answered.get(call.id);
    // The side effect (here: a made-up order status) happens once per call id.
    const output = { order: input.order ?? null, status: "shipped", carrier: "DHL" };
    appendFileSync(ledger, JSON.stringify({ id: call.id, output }) + "\n");
    answered.set(call.id, output);
    return output;
  };
  return serveTools(client, agentId, { lookup_order: lookupOrder }, { signal });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Holdfast({
    baseUrl: process.env.HOLDFAST_URL ?? "http://127.0.0.1:8080",
    apiKey: process.env.HOLDFAST_API_KEY ?? "",
  });
  const controller = new AbortController();
  process.once("SIGINT", () => controller.abort());
  process.once("SIGTERM", () => controller.abort());
  const agentId = process.env.HOLDFAST_AGENT ?? "";
  console.log(`serving lookup_order for agent ${agentId} (Ctrl-C stops)`);
  await runBackend({ client, agentId, ledger: process.env.LEDGER ?? "answered-calls.jsonl", signal: controller.signal });
}
