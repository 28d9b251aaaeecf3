"""Webhook verification with the official Standard Webhooks library."""

from __future__ import annotations

from typing import Any, Mapping, Union

from standardwebhooks import Webhook, WebhookVerificationError

from .schema import EventView

__all__ = ["verify_webhook", "WebhookVerificationError"]


def verify_webhook(headers: Mapping[str, Any], body: Union[str, bytes], secret: str) -> EventView:
    """Verify a delivery (``webhook-id``, ``webhook-timestamp``,
    ``webhook-signature`` against the endpoint's ``whsec_…`` secret) and
    return its event. Raises :class:`WebhookVerificationError` for a bad or
    stale signature. Pass the raw body as received: re-serialized JSON does
    not verify. Deliveries are at least once: dedupe by ``webhook-id``."""
    flat = {str(name).lower(): str(value) for name, value in headers.items()}
    payload = body.decode() if isinstance(body, bytes) else body
    return Webhook(secret).verify(payload, flat)  # type: ignore[no-any-return]
