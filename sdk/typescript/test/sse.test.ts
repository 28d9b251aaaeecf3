// The SSE decoder: fields, comments, line endings split across chunks, and
// the idle watchdog.

import { expect, test } from "vitest";
import { decodeSse, type SseMessage } from "../src/sse.js";

function body(chunks: string[], thenHang = false): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      if (!thenHang) controller.close();
    },
  });
}

async function collect(stream: AsyncGenerator<SseMessage>): Promise<SseMessage[]> {
  const messages: SseMessage[] = [];
  for await (const message of stream) messages.push(message);
  return messages;
}

test("messages, ids, comments and CRLF split across chunks", async () => {
  const messages = await collect(
    decodeSse(body([": heartbeat\n\nid: 7\r", "\nevent: turn.started\r\ndata: {\"a\":\n", "data: 1}\n\nevent: delta\ndata: {}\n\n"])),
  );
  expect(messages).toEqual([
    { id: "7", event: "turn.started", data: '{"a":\n1}' },
    { id: undefined, event: "delta", data: "{}" },
  ]);
});

test("a body silent for idleMs ends the messages", async () => {
  const started = Date.now();
  const messages = await collect(decodeSse(body(["id: 1\nevent: x\ndata: {}\n\n"], true), 100));
  expect(messages).toHaveLength(1);
  expect(Date.now() - started).toBeGreaterThanOrEqual(90);
});
