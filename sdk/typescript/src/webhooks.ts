// Webhook verification with the official Standard Webhooks library.

import { Webhook, WebhookVerificationError } from "standardwebhooks";
import type { Event } from "./client.js";

export { WebhookVerificationError };

/** Header sources: a fetch `Headers`, or Node's `req.headers`. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

/**
 * Verify a delivery (`webhook-id`, `webhook-timestamp`, `webhook-signature`
 * against the endpoint's `whsec_…` secret) and return its event. Throws
 * `WebhookVerificationError` for a bad or stale signature. Pass the raw body
 * as received: re-serialized JSON does not verify. Deliveries are at least
 * once: dedupe by the `webhook-id` header.
 */
export function verifyWebhook(headers: HeaderSource, body: string | Uint8Array, secret: string): Event {
  const flat: Record<string, string> = {};
  if (typeof (headers as Headers).forEach === "function" && typeof (headers as Headers).get === "function") {
    (headers as Headers).forEach((value, name) => (flat[name.toLowerCase()] = value));
  } else {
    for (const [name, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
      if (value !== undefined) flat[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
    }
  }
  const payload = typeof body === "string" ? body : new TextDecoder().decode(body);
  return new Webhook(secret).verify(payload, flat) as Event;
}
