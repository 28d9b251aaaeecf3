"""Misuses of the typed events: test_typing.py checks that mypy rejects
exactly the lines marked "rejected", and nothing else."""

from typing import Any

from holdfast import EventView


def misspelled_type(event: EventView) -> bool:
    return event["type"] == "turn.complete"  # rejected: no such event type


def misspelled_field(event: EventView) -> Any:
    if event["type"] == "turn.completed":
        return event["data"]["usgae"]  # rejected: no such field
    return None


def field_of_another_type(event: EventView) -> Any:
    if event["type"] == "question.asked":
        return event["data"]["usage"]  # rejected: usage is model.response's
    return None


def wrong_field_type(event: EventView) -> int:
    if event["type"] == "question.asked":
        return event["data"]["question"]  # rejected: the question is a string
    return 0
