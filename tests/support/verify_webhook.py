#!/usr/bin/env python3
"""Verify Standard Webhooks signatures, independently of Holdfast's Rust code.

Written from the specification (github.com/standard-webhooks, spec v1.0.0,
"Verifying webhook authenticity"), with the Python standard library only:

  signed content  = f"{webhook-id}.{webhook-timestamp}." + raw body bytes
  key             = base64-decode(secret without its "whsec_" prefix)
  signature       = base64(HMAC-SHA256(key, signed content))
  webhook-signature is a space-separated list of "<version>,<signature>";
  a request is authentic when one "v1" entry matches (constant-time compare)
  and webhook-timestamp is within 5 minutes of now.

Protocol: one JSON object per stdin line,
  {"secret": "whsec_...", "headers": {name: value}, "body_b64": "..."},
answered by one stdout line {"ok": true} or {"ok": false, "error": "..."}.
"""

import base64
import binascii
import hashlib
import hmac
import json
import sys
import time

TOLERANCE_SECONDS = 5 * 60


def verify(secret, headers, body):
    """Return None when authentic, else why not."""
    headers = {name.lower(): value for name, value in headers.items()}
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        return "missing webhook-id, webhook-timestamp or webhook-signature"
    if "." in msg_id:
        return "webhook-id must not contain '.'"
    try:
        sent_at = int(timestamp)
    except ValueError:
        return "webhook-timestamp is not an integer"
    if abs(time.time() - sent_at) > TOLERANCE_SECONDS:
        return "webhook-timestamp is outside the tolerance"
    if not secret.startswith("whsec_"):
        return "secret lacks the whsec_ prefix"
    try:
        key = base64.b64decode(secret[len("whsec_"):], validate=True)
    except binascii.Error:
        return "secret is not base64"
    if len(key) < 24:
        return "secret is shorter than 24 bytes"
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for entry in signatures.split(" "):
        version, _, value = entry.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            return None
    return "no v1 signature matches"


def main():
    for line in sys.stdin:
        request = json.loads(line)
        error = verify(request["secret"], request["headers"], base64.b64decode(request["body_b64"]))
        answer = {"ok": True} if error is None else {"ok": False, "error": error}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
