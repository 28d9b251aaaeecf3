"""Client for Holdfast, a durable runtime for LLM agents on PostgreSQL.

The durable edges are handled for you: an Idempotency-Key on every send,
retries with the same key, streams that resume with Last-Event-ID and
re-read what waits, 409s read as "look at the state", custom tools run once
per call id, webhooks verified with Standard Webhooks; ``client.run(agent,
text, tools=...)`` sends and returns the answer."""

from ._policy import RetryPolicy, StreamItem
from ._run import RunResult, TextChunk
from .client import AsyncHoldfast, AsyncRunStream, Holdfast, RunStream, SendResult
from .errors import *  # noqa: F403 - every typed error
from .errors import __all__ as _errors
from .schema import AgentConfig, AgentView, ApprovalView, EventView, InputView, QuestionView, ToolCallView
from .tools import AsyncToolServer, ToolHandler, ToolServer, serve_tools, serve_tools_async
from .webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "AgentConfig",
    "AgentView",
    "ApprovalView",
    "EventView",
    "InputView",
    "QuestionView",
    "ToolCallView",
    "AsyncHoldfast",
    "AsyncRunStream",
    "AsyncToolServer",
    "Holdfast",
    "RetryPolicy",
    "RunResult",
    "RunStream",
    "SendResult",
    "StreamItem",
    "TextChunk",
    "ToolHandler",
    "ToolServer",
    "WebhookVerificationError",
    "serve_tools",
    "serve_tools_async",
    "verify_webhook",
    *_errors,
]
