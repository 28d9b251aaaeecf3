// Serving custom tools: the calls come from the stream (or from webhooks),
// each handler runs at most once per tool-call id in this process, and its
// result is posted until Holdfast has it.

import type { Event, Holdfast, StreamItem, ToolCall } from "./client.js";
import { APIConnectionError, ConflictError, RateLimitedError, ToolHandlerError, UnavailableError } from "./errors.js";

/**
 * A custom tool's implementation: its input in, its output (any JSON) out.
 * A mistake (throwing, an output that is not JSON) posts an error result the
 * model sees, and is logged; so does a call of a tool with no handler.
 */
export type ToolHandler = (input: any, call: ToolCall) => unknown | Promise<unknown>;

export interface ServeToolsOptions {
  /** Stops serving (the promise then resolves once results in flight are posted). */
  signal?: AbortSignal;
  /**
   * Told about a handler's mistake (a `ToolHandlerError`, posted as the
   * call's error result), a result that could not be posted (someone else
   * answered first, the turn was cancelled; `call` given) or a failed
   * re-read of waiting calls. Default: logged, 409s aside.
   */
  onError?: (error: unknown, call?: ToolCall) => void;
}

/**
 * Runs handlers for custom tool calls. Dedupe is per process: a call seen
 * twice here (a stream replay, a reconnect, a webhook retry) runs once. A
 * call can still run again in another process, or in this one after a
 * restart, until its result is saved: make each handler idempotent by
 * `call.id` (a unique key on it in your own database) when that matters.
 */
export class ToolServer {
  private readonly started = new Set<string>();
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly client: Holdfast,
    private readonly handlers: Record<string, ToolHandler>,
    private readonly options: ServeToolsOptions = {},
  ) {}

  /** Follow one agent until the signal aborts, answering its custom tool calls. */
  async serve(agentId: string): Promise<void> {
    const { signal } = this.options;
    try {
      // From now on: calls that already wait are re-read on each connect,
      // and older events are history (their calls may be long answered).
      const after = (await this.client.agents.get(agentId)).last_event_seq;
      for await (const item of this.client.stream(agentId, { after, signal })) await this.handleItem(item);
    } finally {
      await this.idle();
    }
  }

  /** Act on one item of `client.stream()`: a waiting call is handled. */
  async handleItem(item: StreamItem): Promise<void> {
    if (item.type === "tool_call") this.handle(item.toolCall);
    // A failed re-read after an approval is not the end of serving: the
    // stream's next reconnect re-reads what waits anyway.
    else if (item.type === "event") await this.handleEvent(item.event).catch((e) => this.report(e));
  }

  /**
   * Act on an event, from the stream or a verified webhook: a custom call
   * that waits is handled; after an approval, the calls it let through are
   * re-read.
   */
  async handleEvent(event: Event): Promise<void> {
    const data = event.data as Record<string, unknown>;
    if (event.type === "tool_call.created" && data.kind === "custom" && data.status === "waiting") {
      this.handle({ ...(data as unknown as ToolCall), agent_id: event.agent_id });
    } else if (event.type === "approval.answered") {
      for (const call of await this.client.pendingToolCalls(event.agent_id)) this.handle(call);
    }
  }

  /** Run the handler for `call` unless this process has already started it. */
  handle(call: ToolCall): void {
    const handler = Object.hasOwn(this.handlers, call.name) ? this.handlers[call.name] : undefined;
    if (this.started.has(call.id)) return;
    this.started.add(call.id);
    const run = this.run(handler, call).finally(() => this.inFlight.delete(run));
    this.inFlight.add(run);
  }

  /** Resolves once every handler started so far has finished and posted. */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  private report(error: unknown, call?: ToolCall): void {
    if (this.options.onError) this.options.onError(error, call);
    else if (!(error instanceof ConflictError)) console.error("holdfast: serving tools:", error);
  }

  /** An error result for the model, and the reason logged (or given to `onError`). */
  private mistake(call: ToolCall, why: string): { output: unknown; isError: boolean } {
    this.report(new ToolHandlerError(why), call);
    return { output: { error: why }, isError: true };
  }

  private async outcome(handler: ToolHandler | undefined, call: ToolCall): Promise<{ output: unknown; isError: boolean }> {
    if (handler === undefined) return this.mistake(call, `no handler for tool ${JSON.stringify(call.name)} in this process`);
    let output: unknown;
    try {
      // A handler returning a promise (async or not) is awaited.
      output = await handler(call.input, call);
    } catch (error) {
      const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      return this.mistake(call, `the handler of tool ${JSON.stringify(call.name)} threw ${what}`);
    }
    // undefined (a handler that returns nothing) is posted as null.
    if (output === undefined) return { output: null, isError: false };
    let json: string | undefined;
    try {
      json = JSON.stringify(output);
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      return this.mistake(call, `the handler of tool ${JSON.stringify(call.name)} returned something that is not JSON: ${why}`);
    }
    if (json === undefined) {
      return this.mistake(
        call,
        `the handler of tool ${JSON.stringify(call.name)} returned something that is not JSON: a ${typeof output}`,
      );
    }
    return { output, isError: false };
  }

  private async run(handler: ToolHandler | undefined, call: ToolCall): Promise<void> {
    const { output, isError } = await this.outcome(handler, call);
    // The work is done: post its result until Holdfast has it, through API
    // restarts, rather than ever running the handler again.
    for (let failures = 1; ; failures++) {
      try {
        await this.client.submitToolResult(call.id, output, { isError });
        return;
      } catch (error) {
        const transient =
          error instanceof APIConnectionError ||
          error instanceof UnavailableError ||
          error instanceof RateLimitedError;
        if (!transient) {
          this.report(error, call);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, Math.min(10_000, 250 * 2 ** Math.min(failures, 6))));
      }
    }
  }
}

/**
 * Answer an agent's custom tool calls with `handlers` until `signal` aborts:
 * `serveTools(client, agentId, { lookup_order: async (input) => ... })`.
 */
export function serveTools(
  client: Holdfast,
  agentId: string,
  handlers: Record<string, ToolHandler>,
  options: ServeToolsOptions = {},
): Promise<void> {
  return new ToolServer(client, handlers, options).serve(agentId);
}
