// Misuses of the typed events: `npm test` (typing.test.ts) checks that tsc
// rejects exactly the lines marked "rejected", and nothing else.
import type { Event } from "../../src/index.js";

export function misspelledType(event: Event): boolean {
  return event.type === "turn.complete"; // rejected: no such event type
}

export function misspelledField(event: Event): unknown {
  if (event.type === "turn.completed") return event.data.usgae; // rejected: no such field
  return undefined;
}

export function fieldOfAnotherType(event: Event): unknown {
  if (event.type === "question.asked") return event.data.usage; // rejected: usage is model.response's
  return undefined;
}

export function fieldBeforeNarrowing(event: Event): unknown {
  return event.data.usage; // rejected: not every event type has usage
}

export function wrongFieldType(event: Event): number {
  if (event.type === "question.asked") return event.data.question; // rejected: the question is a string
  return 0;
}
