"""Send one message, serve the agent's `lookup_order` calls, print the answer.

    pip install ./sdk/python
    python examples/python/quickstart.py   # HOLDFAST_URL, HOLDFAST_API_KEY, HOLDFAST_AGENT set
"""

import os

from holdfast import Holdfast


def lookup_order(tool_input, call):
    return {"order": tool_input.get("order"), "status": "shipped", "carrier": "DHL"}


client = Holdfast()  # HOLDFAST_URL and HOLDFAST_API_KEY
stream = client.text_stream(os.environ["HOLDFAST_AGENT"], "Where is order 1001?", tools={"lookup_order": lookup_order})
for chunk in stream:
    if chunk.restart:
        print("\n[the model call was retried; again:]")
    print(chunk.text, end="", flush=True)
print()
assert stream.result is not None
print(f"answer: {stream.result.text}")
