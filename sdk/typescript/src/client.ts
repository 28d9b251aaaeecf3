// The Holdfast client: typed calls over fetch, with the protocol's hard
// parts built in (docs/concepts.md, "What your code should handle"): an
// Idempotency-Key on every send and retries with the same key, streams that
// resume with Last-Event-ID and re-read what waits, 409s read as "look at
// the state", and `run`: send, serve the custom tools, stream, and return
// the answer.

import type { components } from "./schema.js";
import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  ConflictError,
  HoldfastError,
  TurnFailedError,
  errorFor,
} from "./errors.js";
import { decodeSse } from "./sse.js";
import { ToolServer, type ToolHandler } from "./tools.js";

type Schemas = components["schemas"];
export type Agent = Schemas["AgentView"];
export type AgentConfig = Schemas["AgentConfig"];
export type AgentState = Schemas["StateName"];
export type CancelOutcome = Schemas["CancelView"];
export type Input = Schemas["InputView"];
export type InputMode = Schemas["InputMode"];
/** One event: a union discriminated by `type`; testing `event.type` narrows `event.data`. */
export type Event = Schemas["EventView"];
/** Every event type the server writes. */
export type EventType = Event["type"];
/** The event of one type, e.g. `EventOf<"turn.completed">`. */
export type EventOf<T extends EventType> = Extract<Event, { type: T }>;
/** The `data` of one event type, e.g. `EventData<"model.response">`. */
export type EventData<T extends EventType> = EventOf<T>["data"];
export type ToolCall = Schemas["ToolCallView"];
export type Approval = Schemas["ApprovalView"];
export type Question = Schemas["QuestionView"];
export type Webhook = Schemas["WebhookView"];
export type CreatedWebhook = Schemas["CreatedWebhookView"];
export type ConfigVersion = Schemas["ConfigVersionView"];
export type Schedule = Schemas["ScheduleView"];
export type CreateSchedule = Schemas["CreateScheduleRequest"];
export type InboxItem = Schemas["InboxItem"];
export type InboxKind = Schemas["InboxKind"];
export type TurnOutcome = Schemas["TurnOutcome"];
export type ProjectUsage = Schemas["ProjectUsage"];
export type ForkRequest = Schemas["ForkRequest"];
export type ReplayRequest = Schemas["ReplayRequest"];
export type ReplayReport = Schemas["ReplayReport"];
export type ReplaySummary = Schemas["ReplaySummary"];

/**
 * How failed requests are retried: network errors, tries that time out,
 * 429, 502, 503 and 504, for up to `budgetMs` in all (longer than an `up`
 * restart with its 20 s drain), each retry with the same body and headers
 * (a send's Idempotency-Key).
 */
export interface RetryPolicy {
  /** Time from the first try after which no retry starts, in ms (default 60 000). */
  budgetMs: number;
  /** At most this many retries after the first try (default: as many as the budget allows). */
  maxRetries: number;
  /** First backoff delay in ms, doubled per retry, with full jitter (default 250). */
  baseDelayMs: number;
  /** Longest backoff delay in ms (default 5 000; a `Retry-After` is honoured within the budget). */
  maxDelayMs: number;
  /** One try's time limit in ms, after which it counts as a network error (default 30 000; streams have none). */
  timeoutMs: number;
}

export interface HoldfastOptions {
  /** The API (default: `HOLDFAST_URL`, else `http://127.0.0.1:8080`). */
  baseUrl?: string;
  /** A project's API key, `hf_…` (default: `HOLDFAST_API_KEY`). */
  apiKey?: string;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
  retry?: Partial<RetryPolicy>;
}

/** What `send` did: the input as saved, and whether this was a replay of an earlier try. */
export interface SendResult {
  input: Input;
  replayed: boolean;
}

/**
 * Streamed text of a model call in flight; `epoch` is the lease epoch of
 * the call that streamed it (a retried call streams again, from the start,
 * under a new epoch).
 */
export interface Delta {
  text: string;
  epoch: number;
}

/** One item of `stream()`. */
export type StreamItem =
  /** A saved event, each once, in `seq` order. */
  | { type: "event"; event: Event }
  /** A live text delta: a preview, never saved (the saved `model.response` has the text). */
  | { type: "delta"; delta: Delta }
  /** A live delta of extended thinking (the saved `model.response` has the whole `thinking` block). */
  | { type: "thinking_delta"; delta: Delta }
  /** After every (re)connect: a custom tool call waiting for its result. */
  | { type: "tool_call"; toolCall: ToolCall }
  /** After every (re)connect: an approval waiting for a decision. */
  | { type: "approval"; approval: Approval }
  /** After every (re)connect: a question waiting for its answer. */
  | { type: "question"; question: Question };

export interface StreamOptions {
  /** Start after this seq (default 0: every saved event). */
  after?: number;
  /** Stops the stream (the iterator then ends). */
  signal?: AbortSignal;
}

interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | undefined>;
  headers?: Record<string, string>;
  /** Which failures may be retried: every transient one, or only a 429 (the request did nothing). */
  retry?: "transient" | "rate_limit_only";
  signal?: AbortSignal;
}

/** A stream silent this long is reconnected: the server sends a heartbeat every 15 s. */
const STREAM_IDLE_MS = 60_000;
/** A stream open this long was healthy: its end starts the backoff afresh. */
const STREAM_HEALTHY_MS = 5_000;

const DEFAULT_RETRY: RetryPolicy = {
  budgetMs: 60_000,
  maxRetries: Number.POSITIVE_INFINITY,
  baseDelayMs: 250,
  maxDelayMs: 5_000,
  timeoutMs: 30_000,
};

/** `run`'s options. */
export interface RunOptions {
  /** Custom tools served while the turn runs, by name (a call of any other custom tool gets an error result). */
  tools?: Record<string, ToolHandler>;
  /** The send's key (default: a fresh UUID); a `run` retried with it sends nothing twice. */
  idempotencyKey?: string;
  /** Stops waiting (the send stands). */
  signal?: AbortSignal;
}

/**
 * Answer text as it streams. `restart`: a model call was retried (a crash,
 * a lost lease) and streams again from its start, so the text streamed since
 * the last saved model response is void; this chunk is the first of the new
 * try.
 */
export interface TextChunk {
  text: string;
  restart: boolean;
}

/**
 * The answer to `run`: its `text` (the text blocks of the turn's last model
 * response), that response's `message` (its content blocks), the
 * `turn.completed` event, and the input as saved.
 */
export interface RunResult {
  text: string;
  message: Array<Record<string, unknown>>;
  event: EventOf<"turn.completed">;
  input: Input;
  /** The send was a replay of an earlier one with the same Idempotency-Key. */
  replayed: boolean;
}

/**
 * `textStream`'s answer: iterate it (`for await`) for the text as it streams;
 * once the iteration ends, `result` is the answer.
 */
export class RunStream implements AsyncIterable<TextChunk> {
  result?: RunResult;

  constructor(private readonly run: AsyncGenerator<TextChunk | RunResult>) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<TextChunk> {
    for await (const item of this.run) {
      if ("restart" in item) yield item;
      else this.result = item;
    }
  }
}

/** `HOLDFAST_*` from the environment, where there is one (Node; not browsers). */
function fromEnv(name: string): string | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.[name] || undefined;
}

export class Holdfast {
  readonly baseUrl: string;
  readonly agents: Agents;
  readonly schedules: Schedules;
  readonly webhooks: Webhooks;
  readonly replays: Replays;
  readonly retry: RetryPolicy;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;

  /**
   * `new Holdfast()` reads `HOLDFAST_API_KEY` and `HOLDFAST_URL` (default
   * `http://127.0.0.1:8080`); options override them.
   */
  constructor(options: HoldfastOptions = {}) {
    const apiKey = options.apiKey || fromEnv("HOLDFAST_API_KEY");
    if (!apiKey) {
      throw new HoldfastError(
        "no API key: pass { apiKey } or set HOLDFAST_API_KEY. `holdfast up` prints one at start; " +
          "against a server of your own, `holdfast keys create --project NAME` makes one",
      );
    }
    this.baseUrl = (options.baseUrl ?? fromEnv("HOLDFAST_URL") ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.agents = new Agents(this);
    this.schedules = new Schedules(this);
    this.webhooks = new Webhooks(this);
    this.replays = new Replays(this);
  }

  /**
   * Send an input. One Idempotency-Key per call (yours, e.g. your message
   * id, or a fresh UUID), and every retry of a connection error, timeout,
   * 429, 502, 503 or 504 reuses it, so the input is recorded once however often it is tried.
   * `mode` (default `steer`): `queue` waits for the open turn to end,
   * `interrupt` aborts the model call in flight (docs/api.md). An error that
   * ends it carries the key (`idempotencyKey`): a send retried with it later
   * is still recorded once.
   */
  async send(
    agentId: string,
    content: Input["content"] | string,
    options: { idempotencyKey?: string; mode?: InputMode; signal?: AbortSignal } = {},
  ): Promise<SendResult> {
    const key = options.idempotencyKey ?? (await newKey());
    let response: Response;
    try {
      response = await this.request("POST", `/v1/agents/${enc(agentId)}/inputs`, {
        body: options.mode === undefined ? { content } : { content, mode: options.mode },
        headers: { "Idempotency-Key": key },
        signal: options.signal,
      });
    } catch (error) {
      throw error instanceof HoldfastError ? error.withIdempotencyKey(key) : error;
    }
    return {
      input: (await response.json()) as Input,
      replayed: response.headers.get("idempotent-replayed") === "true",
    };
  }

  /**
   * Send `content` and return the answer: serves the custom `tools` while
   * the turn runs, follows the stream through reconnects and API restarts,
   * and resolves once the turn that answers the input ends. The input is
   * queued (`mode: "queue"`): it gets a turn of its own, after any open
   * one. A failed or cancelled turn throws `TurnFailedError`.
   */
  async run(agentId: string, content: Input["content"] | string, options: RunOptions = {}): Promise<RunResult> {
    const stream = this.textStream(agentId, content, options);
    for await (const _ of stream) {
      // The text is for textStream's callers; run waits for the answer.
    }
    return stream.result!;
  }

  /** `run`, yielding the answer's text as it streams; `result` holds the answer once the iteration ends. */
  textStream(agentId: string, content: Input["content"] | string, options: RunOptions = {}): RunStream {
    return new RunStream(this.follow(agentId, content, options));
  }

  /**
   * Each queued input opens a turn of its own, oldest first (docs/api.md,
   * steering modes), so replaying the queue from a known state finds the
   * turn that admits this input.
   */
  private async *follow(
    agentId: string,
    content: Input["content"] | string,
    options: RunOptions,
  ): AsyncGenerator<TextChunk | RunResult> {
    const { signal } = options;
    let [start, queue] = await this.queueAt(agentId);
    const history = start;
    const sent = await this.send(agentId, content, { idempotencyKey: options.idempotencyKey, mode: "queue", signal });
    if (sent.replayed) {
      // Its input was received before `start`: replay from the first event.
      [start, queue] = [0, []];
    }
    const inputId = sent.input.id;
    const server = new ToolServer(this, options.tools ?? {});
    let inTurn = false;
    let message: Array<Record<string, unknown>> = [];
    // The epoch of the model call streaming now, undefined between calls.
    let streaming: number | undefined;
    try {
      for await (const item of this.stream(agentId, { after: start, signal })) {
        // Calls that waited before are re-read with each (re)connect; a
        // replay's older events are history.
        if (item.type !== "event" || item.event.seq > history) await server.handleItem(item);
        if (item.type === "delta" && inTurn) {
          const restart = streaming !== undefined && item.delta.epoch !== streaming;
          streaming = item.delta.epoch;
          yield { text: item.delta.text, restart };
          continue;
        }
        if (item.type !== "event") continue;
        // Each branch tests event.type, which narrows the event to that
        // type's variant (and its data).
        const event = item.event;
        if (event.type === "input.received") {
          const id = event.data.input_id;
          if (event.data.mode === "queue" && !queue.includes(id)) queue.push(id);
        } else if (event.type === "input.removed") {
          const id = event.data.input_id;
          queue = queue.filter((queued) => queued !== id);
        } else if (event.type === "turn.started" && queue.length > 0) {
          // A turn that opens admits the oldest queued input.
          inTurn = queue.shift() === inputId;
        } else if (event.type === "model.response" && inTurn) {
          message = event.data.message;
          streaming = undefined;
        } else if (event.type === "turn.failed" && inTurn) {
          const why = `${event.data.error.type}: ${event.data.error.message}`;
          throw new TurnFailedError(`the turn of input ${inputId} ended with ${event.type} (${why})`, event);
        } else if (event.type === "turn.cancelled" && inTurn) {
          throw new TurnFailedError(`the turn of input ${inputId} ended with ${event.type} (cancelled)`, event);
        } else if (event.type === "turn.completed" && inTurn) {
          const text = message
            .filter((block) => block.type === "text")
            .map((block) => String(block.text ?? ""))
            .join("");
          yield { text, message, event, input: sent.input, replayed: sent.replayed };
          return;
        }
      }
      throw new HoldfastError("stopped before the answer came (the signal aborted)");
    } finally {
      await server.idle();
    }
  }

  /**
   * The agent's last seq and its queued inputs then, oldest first: read
   * until no event came between (admitting or removing an input writes one).
   */
  private async queueAt(agentId: string): Promise<[number, string[]]> {
    for (;;) {
      const seq = (await this.agents.get(agentId)).last_event_seq;
      const queued = await this.json<{ inputs: Input[] }>("GET", `/v1/agents/${enc(agentId)}/inputs`, {
        query: { status: "queued" },
      });
      if ((await this.agents.get(agentId)).last_event_seq === seq) return [seq, queued.inputs.map((i) => i.id)];
    }
  }

  /** One page of an agent's saved events after `after`. */
  async listEvents(
    agentId: string,
    options: { after?: number; limit?: number } = {},
  ): Promise<{ events: Event[]; has_more: boolean }> {
    return this.json("GET", `/v1/agents/${enc(agentId)}/events`, {
      query: { after: options.after, limit: options.limit },
    });
  }

  /** Custom tool calls waiting for their result. */
  async pendingToolCalls(agentId: string): Promise<ToolCall[]> {
    const list = await this.json<{ tool_calls: ToolCall[] }>(
      "GET",
      `/v1/agents/${enc(agentId)}/tool-calls`,
      { query: { status: "waiting", kind: "custom" } },
    );
    return list.tool_calls;
  }

  /** Approvals waiting for a decision. */
  async pendingApprovals(agentId: string): Promise<Approval[]> {
    const list = await this.json<{ approvals: Approval[] }>(
      "GET",
      `/v1/agents/${enc(agentId)}/approvals`,
      { query: { status: "pending" } },
    );
    return list.approvals;
  }

  /** Questions waiting for an answer. */
  async pendingQuestions(agentId: string): Promise<Question[]> {
    const list = await this.json<{ questions: Question[] }>(
      "GET",
      `/v1/agents/${enc(agentId)}/questions`,
      { query: { status: "pending" } },
    );
    return list.questions;
  }

  /**
   * Everything in the project waiting on a person or a client (approvals,
   * budget approvals, questions, custom tool calls, commands no machine has
   * accepted), oldest first, of one `kind` and of agents whose metadata
   * contains `metadata` if given, fetching pages as it goes.
   */
  async *inbox(
    options: { kind?: InboxKind; metadata?: Record<string, unknown>; pageSize?: number } = {},
  ): AsyncGenerator<InboxItem> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.json<Schemas["Inbox"]>("GET", "/v1/inbox", {
        query: {
          kind: options.kind,
          metadata: options.metadata === undefined ? undefined : JSON.stringify(options.metadata),
          limit: options.pageSize,
          cursor,
        },
      });
      yield* page.items;
      if (!page.has_more || page.next_cursor == null) return;
      cursor = page.next_cursor;
    }
  }

  /**
   * The project's model usage by UTC day and model over the last `days`
   * days (default 30), newest first, and its sum, with cost in USD.
   */
  projectUsage(options: { days?: number } = {}): Promise<ProjectUsage> {
    return this.json("GET", "/v1/usage", { query: { days: options.days } });
  }

  /**
   * Everything an agent does, live: every saved event once and in order,
   * live deltas, and after each (re)connect what waits on you. A dropped
   * connection or an API restart reconnects with backoff and
   * `Last-Event-ID`; an answer that will not change on retry (401, 404)
   * ends it with that error.
   */
  async *stream(agentId: string, options: StreamOptions = {}): AsyncGenerator<StreamItem> {
    let last = options.after ?? 0;
    // Connections in a row that failed, or ended before delivering anything
    // or lasting a while: the backoff grows with them, so a stream that
    // opens and drops at once is not reopened in a tight loop.
    let failures = 0;
    const { signal } = options;
    while (!signal?.aborted) {
      try {
        const response = await this.open(`/v1/agents/${enc(agentId)}/stream`, last, signal);
        const opened = Date.now();
        try {
          // What waits is re-read after the stream is open, so nothing that
          // starts waiting in between is missed: it is in the stream too.
          for (const toolCall of await this.pendingToolCalls(agentId)) yield { type: "tool_call", toolCall };
          for (const approval of await this.pendingApprovals(agentId)) yield { type: "approval", approval };
          for (const question of await this.pendingQuestions(agentId)) yield { type: "question", question };
          for await (const message of decodeSse(response.body!, STREAM_IDLE_MS)) {
            failures = 0;
            if (message.event === "delta" || message.event === "thinking_delta") {
              yield { type: message.event, delta: JSON.parse(message.data) as Delta };
              continue;
            }
            if (message.id === undefined) continue;
            const seq = Number(message.id);
            if (!(seq > last)) continue;
            last = seq;
            yield { type: "event", event: JSON.parse(message.data) as Event };
          }
        } finally {
          // Closes the connection however this ends (a consumer's break included).
          await response.body?.cancel().catch(() => undefined);
          if (Date.now() - opened >= STREAM_HEALTHY_MS) failures = 0;
        }
      } catch (error) {
        if (signal?.aborted) return;
        // An answer that will not change, or a body that is not the API's
        // (unparseable JSON), ends the stream; anything else is the
        // connection's failure (refused, reset, cut mid-body): reconnect.
        if (error instanceof APIError && !isTransient(error.status)) throw error;
        if (error instanceof SyntaxError) throw error;
      }
      failures += 1;
      await sleep(backoff(this.retry, failures), signal);
    }
  }

  /** Every saved event once, in order, following the agent live (no deltas). */
  async *events(agentId: string, options: StreamOptions = {}): AsyncGenerator<Event> {
    for await (const item of this.stream(agentId, options)) {
      if (item.type === "event") yield item.event;
    }
  }

  /**
   * Post a custom tool call's result. A 409 whose call already holds this
   * output is success (an earlier try got through); any other 409 throws a
   * `ConflictError` whose `current` is the call as it stands.
   */
  async submitToolResult(
    toolCallId: string,
    output: unknown,
    options: { isError?: boolean } = {},
  ): Promise<ToolCall> {
    const isError = options.isError ?? false;
    try {
      return await this.json("POST", `/v1/tool-calls/${enc(toolCallId)}/result`, {
        body: { output, is_error: isError },
      });
    } catch (error) {
      const current = error instanceof ConflictError ? (error.current as ToolCall | undefined) : undefined;
      if (
        current?.status === "completed" &&
        (current.is_error ?? false) === isError &&
        (await this.sameContent(current.agent_id, current.output, output))
      ) {
        return current;
      }
      throw error;
    }
  }

  /**
   * The bytes of an image or document the agent was sent, by the
   * `attachment_id` of its reference (`{"type": "attachment", ...}`).
   */
  async attachment(agentId: string, attachmentId: string): Promise<Uint8Array> {
    const response = await this.request("GET", `/v1/agents/${enc(agentId)}/attachments/${enc(attachmentId)}`);
    return new Uint8Array(await response.arrayBuffer());
  }

  /**
   * Whether `stored` (an input's content, a tool call's output or an
   * event's, as read back from the server) is `sent` (what a client
   * posted): the server keeps each base64 image or document as an
   * attachment reference, which is equal to the source it replaced when the
   * attachment's bytes are the bytes sent (fetched to compare).
   */
  async sameContent(agentId: string, stored: unknown, sent: unknown): Promise<boolean> {
    const files = storedFiles(stored, sent);
    if (files === undefined) return false;
    for (const file of files) {
      const bytes = await this.attachment(agentId, file.attachmentId);
      if (!sameBytes(bytes, file.data)) return false;
    }
    return true;
  }

  /** Approve a tool call (a 409 whose approval is already approved is success). */
  approve(approvalId: string, options: { by: string; reason?: string }): Promise<Approval> {
    return this.decide(approvalId, "approve", options);
  }

  /** Deny a tool call (a 409 whose approval is already denied is success). */
  deny(approvalId: string, options: { by: string; reason?: string }): Promise<Approval> {
    return this.decide(approvalId, "deny", options);
  }

  /** Answer a question (a 409 whose question already holds this answer is success). */
  async answer(questionId: string, answer: string, options: { by: string }): Promise<Question> {
    try {
      return await this.json("POST", `/v1/questions/${enc(questionId)}/answer`, {
        body: { answer, by: options.by },
      });
    } catch (error) {
      const current = error instanceof ConflictError ? error.current : undefined;
      if (current?.status === "answered" && current.answer === answer) return current as Question;
      throw error;
    }
  }

  private async decide(
    approvalId: string,
    decision: "approve" | "deny",
    options: { by: string; reason?: string },
  ): Promise<Approval> {
    try {
      return await this.json("POST", `/v1/approvals/${enc(approvalId)}`, {
        body: { decision, by: options.by, reason: options.reason },
      });
    } catch (error) {
      const current = error instanceof ConflictError ? error.current : undefined;
      const decided = decision === "approve" ? "approved" : "denied";
      if (current?.status === decided) return current as Approval;
      throw error;
    }
  }

  /** A request answering JSON, parsed. */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.request(method, path, options);
    return (await response.json()) as T;
  }

  /**
   * One request, retried per the policy; a non-2xx answer throws its typed
   * error. The body and headers (the Idempotency-Key) are the same on
   * every try.
   */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.apiKey}`,
      accept: "application/json",
      ...options.headers,
    };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const onlyRateLimit = options.retry === "rate_limit_only";
    const started = Date.now();
    let retries = 0;
    // The wait before the next retry, or undefined once the policy's
    // retries or budget are spent.
    const nextDelay = (retryAfterSecs?: number): number | undefined => {
      retries += 1;
      if (retries > this.retry.maxRetries) return undefined;
      const delay = retryAfterSecs === undefined ? backoff(this.retry, retries) : retryAfterSecs * 1000;
      return Date.now() - started + delay > this.retry.budgetMs ? undefined : delay;
    };
    for (;;) {
      let response: Response;
      const limit = withTimeout(this.retry.timeoutMs, options.signal);
      try {
        response = await this.fetchImpl(url, { method, headers, body, signal: limit.signal });
      } catch (cause) {
        if (options.signal?.aborted) throw cause;
        const delay = onlyRateLimit ? undefined : nextDelay();
        if (delay === undefined) {
          const Class = cause instanceof TryTimedOut ? APITimeoutError : APIConnectionError;
          throw new Class(`${method} ${url.href}: no answer (${describe(cause)})`, { cause });
        }
        await sleep(delay, options.signal);
        continue;
      } finally {
        // The limit covers getting the answer's headers; its body is the
        // caller's to read (a stream's for as long as it lasts).
        limit.clear();
      }
      if (response.ok) return response;
      const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      const retryable = response.status === 429 || (!onlyRateLimit && isTransient(response.status));
      const delay = retryable ? nextDelay(retryAfter) : undefined;
      if (delay !== undefined) {
        await response.body?.cancel();
        await sleep(delay, options.signal);
        continue;
      }
      const errorBody = await response.json().catch(() => undefined);
      throw errorFor(response.status, errorBody, retryAfter);
    }
  }

  /** Open the SSE stream after `last` (the one place `Last-Event-ID` is set). */
  private async open(path: string, last: number, signal?: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.apiKey}`,
      accept: "text/event-stream",
    };
    if (last > 0) headers["last-event-id"] = String(last);
    const response = await this.fetchImpl(this.baseUrl + path, { headers, signal });
    if (!response.ok || !response.body) {
      const errorBody = await response.json().catch(() => undefined);
      throw errorFor(response.status, errorBody, parseRetryAfter(response.headers.get("retry-after")));
    }
    return response;
  }
}

/** `/v1/agents`: create, get, list (every page), update, cancel, archive. */
export class Agents {
  constructor(private readonly client: Holdfast) {}

  /** Create an agent. Retried only on a 429 (a retried create could make two). */
  create(config: AgentConfig): Promise<Agent> {
    return this.client.json("POST", "/v1/agents", { body: config, retry: "rate_limit_only" });
  }

  get(agentId: string): Promise<Agent> {
    return this.client.json("GET", `/v1/agents/${enc(agentId)}`);
  }

  /**
   * Every agent (of a state, and whose last turn ended with `outcome`, if
   * given), oldest first, fetching pages as it goes.
   */
  async *list(
    options: { state?: AgentState; outcome?: TurnOutcome; pageSize?: number } = {},
  ): AsyncGenerator<Agent> {
    let after: string | undefined;
    for (;;) {
      const page = await this.client.json<{ agents: Agent[]; has_more: boolean }>("GET", "/v1/agents", {
        query: { state: options.state, outcome: options.outcome, limit: options.pageSize, after },
      });
      yield* page.agents;
      if (!page.has_more || page.agents.length === 0) return;
      after = page.agents[page.agents.length - 1]!.id;
    }
  }

  /**
   * The agents `q` finds (an agent id; `key=value` on metadata; text in the
   * metadata or id; or words of their inputs and saved messages), newest
   * activity first, fetching pages as it goes.
   */
  async *search(
    q: string,
    options: { state?: AgentState; outcome?: TurnOutcome; pageSize?: number } = {},
  ): AsyncGenerator<Agent> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.client.json<{ agents: Agent[]; has_more: boolean; next_cursor?: string | null }>(
        "GET",
        "/v1/agents",
        { query: { order: "activity", q, state: options.state, outcome: options.outcome, limit: options.pageSize, cursor } },
      );
      yield* page.agents;
      if (!page.has_more || !page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /**
   * Change the config with a JSON merge patch (`null` removes a field),
   * saved as its next version; `apply: "next_turn"` lets a running turn
   * finish on its version.
   */
  update(agentId: string, patch: Record<string, unknown>, options: { apply?: "now" | "next_turn" } = {}): Promise<Agent> {
    const body = options.apply === undefined ? patch : { ...patch, apply: options.apply };
    return this.client.json("PATCH", `/v1/agents/${enc(agentId)}`, { body });
  }

  /** The agent's config versions, oldest first. */
  async versions(agentId: string): Promise<ConfigVersion[]> {
    return (await this.client.json<{ versions: ConfigVersion[] }>("GET", `/v1/agents/${enc(agentId)}/versions`)).versions;
  }

  version(agentId: string, version: number): Promise<ConfigVersion> {
    return this.client.json("GET", `/v1/agents/${enc(agentId)}/versions/${version}`);
  }

  /** Change a waiting input: its mode (`queue` <-> `steer`) or its place (from 1) in the queue. */
  updateInput(inputId: string, change: { mode?: "queue" | "steer"; position?: number }): Promise<Input> {
    return this.client.json("PATCH", `/v1/inputs/${enc(inputId)}`, { body: change });
  }

  cancel(agentId: string): Promise<CancelOutcome> {
    return this.client.json("POST", `/v1/agents/${enc(agentId)}/cancel`);
  }

  archive(agentId: string): Promise<Agent> {
    return this.client.json("POST", `/v1/agents/${enc(agentId)}/archive`);
  }

  /**
   * Fork an agent at one of its steps (`at: { seq }` or `at: { turn }`;
   * default its last), with an optional config merge patch: a new idle
   * agent whose history is the source's up to there. Retried only on a 429
   * (a retried fork could make two).
   */
  fork(agentId: string, options: ForkRequest = {}): Promise<Agent> {
    return this.client.json("POST", `/v1/agents/${enc(agentId)}/fork`, { body: options, retry: "rate_limit_only" });
  }
}

/**
 * Replays: an agent's recorded turns sent again with a changed config, its
 * tool calls answered from the recording (nothing runs).
 */
export class Replays {
  constructor(private readonly client: Holdfast) {}

  /** Start a replay of `agentId`; the answer is its report as it starts. Retried only on a 429. */
  create(agentId: string, options: ReplayRequest = {}): Promise<ReplayReport> {
    return this.client.json("POST", `/v1/agents/${enc(agentId)}/replays`, { body: options, retry: "rate_limit_only" });
  }

  /** The report of a replay, as far as it has got. */
  get(replayId: string): Promise<ReplayReport> {
    return this.client.json("GET", `/v1/replays/${enc(replayId)}`);
  }

  /** The replays of `agentId`, oldest first, without their turns. */
  async list(agentId: string): Promise<ReplaySummary[]> {
    return (await this.client.json<{ replays: ReplaySummary[] }>("GET", `/v1/agents/${enc(agentId)}/replays`)).replays;
  }

  /**
   * The report once the replay has ended (`completed` or `failed`), asking
   * every `intervalMs` (default 500); throws after `timeoutMs` (default 10
   * minutes) or when `signal` aborts.
   */
  async waitForReport(
    replayId: string,
    options: { intervalMs?: number; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ReplayReport> {
    const deadline = Date.now() + (options.timeoutMs ?? 600_000);
    for (;;) {
      const report = await this.get(replayId);
      if (report.status !== "running") return report;
      if (Date.now() >= deadline) {
        throw new HoldfastError(`replay ${replayId} is still running after ${options.timeoutMs ?? 600_000} ms`);
      }
      options.signal?.throwIfAborted();
      await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 500));
    }
  }
}

/** `/v1/agents/{id}/schedules`: inputs sent on a cron schedule or every interval. */
export class Schedules {
  constructor(private readonly client: Holdfast) {}

  /** Create a schedule. Retried only on a 429 (a retried create could make two). */
  create(agentId: string, schedule: CreateSchedule): Promise<Schedule> {
    return this.client.json("POST", `/v1/agents/${enc(agentId)}/schedules`, { body: schedule, retry: "rate_limit_only" });
  }

  async list(agentId: string): Promise<Schedule[]> {
    return (await this.client.json<{ schedules: Schedule[] }>("GET", `/v1/agents/${enc(agentId)}/schedules`)).schedules;
  }

  get(agentId: string, scheduleId: string): Promise<Schedule> {
    return this.client.json("GET", `/v1/agents/${enc(agentId)}/schedules/${enc(scheduleId)}`);
  }

  pause(agentId: string, scheduleId: string): Promise<Schedule> {
    return this.client.json("PATCH", `/v1/agents/${enc(agentId)}/schedules/${enc(scheduleId)}`, { body: { paused: true } });
  }

  /** Resume from the next slot on (slots passed while paused are not fired). */
  resume(agentId: string, scheduleId: string): Promise<Schedule> {
    return this.client.json("PATCH", `/v1/agents/${enc(agentId)}/schedules/${enc(scheduleId)}`, { body: { paused: false } });
  }

  async delete(agentId: string, scheduleId: string): Promise<void> {
    await this.client.request("DELETE", `/v1/agents/${enc(agentId)}/schedules/${enc(scheduleId)}`);
  }
}

/** `/v1/webhooks`: endpoints that receive every event, signed per Standard Webhooks. */
export class Webhooks {
  constructor(private readonly client: Holdfast) {}

  /** Register an endpoint; the answer holds its `whsec_…` secret, shown once. */
  create(options: { url: string; events?: string[]; description?: string }): Promise<CreatedWebhook> {
    return this.client.json("POST", "/v1/webhooks", { body: options, retry: "rate_limit_only" });
  }

  async list(): Promise<Webhook[]> {
    return (await this.client.json<{ webhooks: Webhook[] }>("GET", "/v1/webhooks")).webhooks;
  }

  async delete(webhookId: string): Promise<void> {
    await this.client.request("DELETE", `/v1/webhooks/${enc(webhookId)}`);
  }
}

/** A fresh UUID: Web Crypto's (browsers, Node >= 19), else node:crypto's (Node 18). */
async function newKey(): Promise<string> {
  const webCrypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  const nodeCrypto = "node:crypto";
  return ((await import(nodeCrypto)) as { randomUUID: () => string }).randomUUID();
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function isTransient(status: number): boolean {
  return status === 429 || status === 502 || status === 503 || status === 504;
}

/** Full-jitter exponential backoff for the `failures`-th retry. */
function backoff(policy: RetryPolicy, failures: number): number {
  if (failures <= 0) return 0;
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(failures - 1, 20));
  return Math.random() * ceiling;
}

/** A try's own time limit ran out (not the caller's signal). */
class TryTimedOut extends Error {}

/** An error and its causes, for a message: `fetch failed: connect ECONNREFUSED 127.0.0.1:8080`. */
function describe(error: unknown): string {
  const parts: string[] = [];
  for (let e = error; e !== undefined && e !== null && parts.length < 5; e = (e as { cause?: unknown }).cause) {
    parts.push(e instanceof Error ? e.message : String(e));
    if (!(e instanceof Error)) break;
  }
  return parts.join(": ");
}

/** `Retry-After` in seconds: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}

/** A signal that aborts after `ms` or with `outer` (AbortSignal.any and .timeout need Node 20). */
function withTimeout(ms: number, outer?: AbortSignal): { signal: AbortSignal; clear: () => void } {
  const controller = new AbortController();
  const abort = () => controller.abort(outer?.reason);
  const timer = setTimeout(() => controller.abort(new TryTimedOut(`no answer within ${ms} ms`)), ms);
  if (outer?.aborted) abort();
  outer?.addEventListener("abort", abort, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", abort);
    },
  };
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A file the server stored as an attachment: its reference's id and the bytes sent for it. */
export interface StoredFile {
  attachmentId: string;
  data: Uint8Array;
}

/**
 * Whether `stored` (content or a result as the server keeps it) can be
 * `sent`: the same JSON, except that the server keeps each base64 source of
 * an image or document as an attachment reference (`{"type": "attachment",
 * "attachment_id", "media_type", "size_bytes"}`). Returns the files whose
 * bytes remain to be compared with the attachments' (of the same media type
 * and size), or `undefined` when `stored` is not `sent` whatever the
 * attachments hold. `Holdfast.sameContent` does the whole comparison.
 */
export function storedFiles(stored: unknown, sent: unknown): StoredFile[] | undefined {
  const files: StoredFile[] = [];
  const walk = (a: unknown, b: unknown): boolean => {
    if (a === b) return true;
    if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const x = a as Record<string, unknown>;
    const y = b as Record<string, unknown>;
    if (x.type === "attachment" && y.type === "base64") {
      const data = typeof y.data === "string" ? base64Bytes(y.data) : undefined;
      if (data === undefined || x.media_type !== y.media_type || x.size_bytes !== data.length) return false;
      files.push({ attachmentId: String(x.attachment_id), data });
      return true;
    }
    const kx = Object.keys(x);
    const ky = Object.keys(y);
    return kx.length === ky.length && ky.every((k) => k in x && walk(x[k], y[k]));
  };
  return walk(stored, sent) ? files : undefined;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** The bytes base64 text decodes to (undefined if it is not base64). */
function base64Bytes(text: string): Uint8Array | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) return undefined;
  return Uint8Array.from(atob(text), (char) => char.charCodeAt(0));
}
