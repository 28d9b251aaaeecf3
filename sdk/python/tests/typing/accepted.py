"""Correct uses of the typed events: test_typing.py checks that mypy accepts this file."""

from holdfast import EventView
from holdfast.schema import ModelResponseData


def describe(event: EventView) -> str:
    if event["type"] == "turn.completed":
        return f"{event['data']['usage']['output_tokens']} tokens"
    if event["type"] == "model.response":
        return ",".join(str(block.get("type")) for block in event["data"]["message"])
    if event["type"] == "tool_call.completed":
        return f"{event['data']['name']}: {event['data'].get('output')}"
    if event["type"] == "turn.failed":
        return f"{event['data']['error']['type']}: {event['data']['error']['message']}"
    if event["type"] == "question.asked":
        return event["data"]["question"]
    return event["type"]


def usage(data: ModelResponseData) -> int:
    return data["usage"]["input_tokens"] + data["usage"]["output_tokens"]
