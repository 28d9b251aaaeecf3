"""A custom-tool backend: answers one agent's ``lookup_order`` calls.

    pip install ./sdk/python
    HOLDFAST_URL=http://127.0.0.1:8080 HOLDFAST_API_KEY=hf_... HOLDFAST_AGENT=<agent id> \\
        python examples/python/tool_backend.py

The tool server runs each call at most once in this process. Across
restarts (or a second copy of this backend) a call can come again until its
result is saved, so the side effect is keyed by the tool-call id in a ledger
that survives restarts: a call already in it is answered from it, not redone.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
from typing import Any, Dict

from holdfast import AsyncHoldfast, AsyncToolServer, ToolCallView


async def run_backend(client: AsyncHoldfast, agent_id: str, ledger: pathlib.Path) -> None:
    """Serve ``lookup_order`` for ``agent_id`` until cancelled; one JSON line per answered call in ``ledger``."""
    answered: Dict[str, Any] = {}
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            entry = json.loads(line)
            answered[entry["id"]] = entry["output"]

    async def lookup_order(tool_input: Dict[str, Any], call: ToolCallView) -> Any:
        if call["id"] in answered:
            return answered[call["id"]]
        # The side effect (here: a made-up order status) happens once per call id.
        output = {"order": tool_input.get("order"), "status": "shipped", "carrier": "DHL"}
        with ledger.open("a") as f:
            f.write(json.dumps({"id": call["id"], "output": output}) + "\n")
        answered[call["id"]] = output
        return output

    await AsyncToolServer(client, {"lookup_order": lookup_order}).serve(agent_id)


async def main() -> None:
    agent_id = os.environ["HOLDFAST_AGENT"]
    ledger = pathlib.Path(os.environ.get("LEDGER", "answered-calls.jsonl"))
    async with AsyncHoldfast(os.environ["HOLDFAST_API_KEY"], os.environ.get("HOLDFAST_URL", "http://127.0.0.1:8080")) as client:
        serving = asyncio.ensure_future(run_backend(client, agent_id, ledger))
        for stop in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(stop, serving.cancel)
        print(f"serving lookup_order for agent {agent_id} (Ctrl-C stops)")
        try:
            await serving
        except asyncio.CancelledError:
            pass


if __name__ == "__main__":
    asyncio.run(main())
