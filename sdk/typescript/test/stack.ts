// A real Holdfast for these tests: `holdfast-test-stack` (tests/src/bin)
// starts a fresh database, the fake model, and real `holdfast server api`,
// `worker` and `maintenance` processes, and takes commands on stdin
// (restart the API, SIGKILL a worker).

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

export function stackBinary(): string {
  const target = process.env.CARGO_TARGET_DIR ?? path.join(root, "target");
  const binary = path.join(target, "debug", "holdfast-test-stack");
  if (!existsSync(binary)) {
    throw new Error(`${binary} is missing: run \`cargo build --workspace --bins\` in ${root} first`);
  }
  return binary;
}

export interface StackInfo {
  /** The API. */
  url: string;
  /** A project's API key. */
  key: string;
}

export class Stack {
  private waiting: Array<(line: Record<string, unknown>) => void> = [];
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    readonly info: StackInfo,
    lines: AsyncIterator<string>,
  ) {
    void (async () => {
      for (;;) {
        const next = await lines.next();
        if (next.done) return;
        this.waiting.shift()?.(JSON.parse(next.value));
      }
    })();
  }

  static async start(): Promise<Stack> {
    const child = spawn(stackBinary(), [], { stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk) => (stderr += chunk));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const first = await lines.next();
    if (first.done) throw new Error(`holdfast-test-stack exited: ${stderr}`);
    return new Stack(child, JSON.parse(first.value), lines);
  }

  /** Send one command and wait for its answer (commands run one at a time). */
  command(line: string): Promise<Record<string, unknown>> {
    const answer = this.queue.then(
      () =>
        new Promise<Record<string, unknown>>((resolve, reject) => {
          this.waiting.push((reply) => (reply.ok ? resolve(reply) : reject(new Error(String(reply.error)))));
          this.child.stdin.write(line + "\n");
        }),
    );
    this.queue = answer.catch(() => undefined);
    return answer;
  }

  /** Close stdin: the stack stops its processes and drops its database. */
  async stop(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.stdin.end();
    await exited;
  }
}

/** Poll `check` every 50 ms until it holds (throws after `timeoutMs`). */
export async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
