// Correct uses of the typed events: `npm test` (typing.test.ts) checks
// that tsc accepts this file.
import type { Event, EventData } from "../../src/index.js";

export function describe(event: Event): string {
  if (event.type === "turn.completed") return `${event.data.usage.output_tokens} tokens`;
  if (event.type === "model.response") return event.data.message.map((block) => String(block.type)).join(",");
  if (event.type === "tool_call.completed") return `${event.data.name}: ${JSON.stringify(event.data.output)}`;
  if (event.type === "turn.failed") return `${event.data.error.type}: ${event.data.error.message}`;
  if (event.type === "approval.requested") return event.data.kind;
  if (event.type === "question.asked") return event.data.question;
  return event.type;
}

export function usage(data: EventData<"model.response">): number {
  return data.usage.input_tokens + data.usage.output_tokens;
}
