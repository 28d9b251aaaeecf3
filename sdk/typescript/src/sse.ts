// A Server-Sent Events decoder (the WHATWG event-stream format): bytes in,
// one message per blank line out. Comments (heartbeats) are dropped.

export interface SseMessage {
  /** The `id:` field; absent on live deltas. */
  id?: string;
  /** The `event:` field (default `message`). */
  event: string;
  data: string;
}

/**
 * Decode `body`; with `idleMs`, a body silent that long (no data, not even
 * a heartbeat) is cancelled and the messages end, as for a dropped
 * connection: a half-open TCP connection never reports that it is gone.
 */
export async function* decodeSse(body: ReadableStream<Uint8Array>, idleMs?: number): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  let watchdog: ReturnType<typeof setTimeout> | undefined;
  try {
    for (;;) {
      if (idleMs !== undefined) {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => void reader.cancel().catch(() => undefined), idleMs);
      }
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        const width = buffer.startsWith("\r\n", newline) ? 2 : 1;
        // A lone \r at the end may be half of \r\n: wait for more.
        if (width === 1 && buffer[newline] === "\r" && newline === buffer.length - 1) break;
        buffer = buffer.slice(newline + width);
        if (line === "") {
          if (data.length > 0) yield { id, event: event || "message", data: data.join("\n") };
          id = undefined;
          event = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") id = value;
        else if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
    }
  } finally {
    clearTimeout(watchdog);
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}
