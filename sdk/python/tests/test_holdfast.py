"""Against a real Holdfast (real Postgres, real ``holdfast`` processes, the
fake model): see conftest.py."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import threading
from typing import Any, Dict, List, Optional

import pytest

from holdfast import (
    AsyncHoldfast,
    AsyncToolServer,
    ConflictError,
    Holdfast,
    InvalidRequestError,
    NotFoundError,
    RetryPolicy,
    ToolServer,
    WebhookVerificationError,
    serve_tools,
    verify_webhook,
)

from conftest import wait_until

MODEL = {"provider": "anthropic", "name": "claude-test"}
LOOKUP = {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}}
FAST = RetryPolicy(base_delay=0.1)


def directive(**d: Any) -> str:
    """A directive for the fake model (tests/src/bin/holdfast-test-stack.rs)."""
    return json.dumps(d)


@pytest.fixture
def client(stack):
    with Holdfast(stack.key, stack.url, retry=FAST) as client:
        yield client


def all_events(client: Holdfast, agent_id: str) -> List[Dict[str, Any]]:
    events: List[Dict[str, Any]] = []
    while True:
        page = client.list_events(agent_id, after=events[-1]["seq"] if events else 0, limit=1000)
        events.extend(page["events"])
        if not page["has_more"]:
            return events


def wait_for_event(client: Holdfast, agent_id: str, kind: str) -> List[Dict[str, Any]]:
    found: List[List[Dict[str, Any]]] = []

    def check() -> bool:
        events = all_events(client, agent_id)
        found[:] = [events]
        return any(e["type"] == kind for e in events)

    wait_until(f"{kind} on {agent_id}", check)
    return found[0]


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(handler: type) -> Server:
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_agents_create_get_list_every_page_update_cancel_archive(client):
    created = [client.agents.create({"model": MODEL, "metadata": {"n": i}}) for i in range(5)]
    assert client.agents.get(created[0]["id"])["id"] == created[0]["id"]
    listed = [agent["id"] for agent in client.agents.list(page_size=2)]
    assert all(agent["id"] in listed for agent in created)
    assert client.agents.update(created[0]["id"], {"system": "Be brief."})["config"]["system"] == "Be brief."
    client.send(created[1]["id"], directive(say="a long slow answer to cancel", trickle_ms=200))
    assert client.agents.cancel(created[1]["id"])["status"] in ("cancelled", "requested")
    assert client.agents.archive(created[2]["id"])["state"] == "archived"


def test_a_schedule_is_created_listed_paused_resumed_and_deleted(client):
    agent = client.agents.create({"model": MODEL})
    created = client.schedules.create(
        agent["id"],
        {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin", "input": {"content": "summarise the overnight tickets"}},
    )
    assert created["state"] == "active" and created["input"]["mode"] == "queue"
    assert [s["id"] for s in client.schedules.list(agent["id"])] == [created["id"]]
    assert client.schedules.pause(agent["id"], created["id"])["state"] == "paused"
    assert client.schedules.resume(agent["id"], created["id"])["next_fire_at"] == created["next_fire_at"]
    with pytest.raises(InvalidRequestError) as invalid:
        client.schedules.create(agent["id"], {"every": "500ms", "input": {"content": "x"}})
    assert invalid.value.field == "every"
    client.schedules.delete(agent["id"], created["id"])
    with pytest.raises(NotFoundError):
        client.schedules.get(agent["id"], created["id"])


def test_config_changes_are_numbered_versions_and_inputs_move(client):
    agent = client.agents.create({"model": MODEL, "system": "one"})
    assert client.agents.update(agent["id"], {"system": "two"}, apply="next_turn")["config_version"] == 2
    assert [v["version"] for v in client.agents.versions(agent["id"])] == [1, 2]
    assert client.agents.version(agent["id"], 1)["config"]["system"] == "one"
    with pytest.raises(NotFoundError):
        client.agents.update_input("00000000-0000-0000-0000-000000000000", position=1)


def test_a_fork_and_a_replay_of_a_finished_turn(client):
    agent = client.agents.create({"model": MODEL})
    client.send(agent["id"], directive(say="forty-two"))
    wait_for_event(client, agent["id"], "turn.completed")
    fork = client.agents.fork(agent["id"], at={"turn": 1}, config={"system": "Be brief."})
    assert fork["forked_from"]["agent_id"] == agent["id"]
    assert fork["state"] == "idle"
    assert fork["config"]["system"] == "Be brief."

    started = client.replays.create(agent["id"], config={"system": "Be brief."})
    assert started["status"] in ("running", "completed")
    report = client.replays.wait_for_report(started["id"], interval=0.1, timeout=60)
    assert report["status"] == "completed"
    assert report["turns"][0]["replay"]["answer"] == "forty-two"
    assert report["turns"][0]["answer_equal"]
    assert [r["id"] for r in client.replays.list(agent["id"])] == [started["id"]]
    with pytest.raises(InvalidRequestError) as refused:
        client.agents.fork(agent["id"], at={"seq": 10_000})
    assert refused.value.field == "at.seq"
    client.agents.update(agent["id"], {"system": "Be long."})
    assert client.agents.fork(agent["id"], version=1)["config"].get("system") is None
    with pytest.raises(InvalidRequestError) as no_version:
        client.replays.create(agent["id"], version=9)
    assert no_version.value.field == "version"


def test_agents_search_finds_an_agent_by_a_word_of_its_answer(client):
    agent = client.agents.create({"model": MODEL})
    client.run(agent["id"], directive(say="The pelican ledger balances."))
    assert [a["id"] for a in client.agents.search("pelican")] == [agent["id"]]
    assert list(client.agents.search("pelican", state="archived")) == []


def test_errors_are_typed_by_their_type_with_the_field(client):
    with pytest.raises(NotFoundError):
        client.agents.get("00000000-0000-0000-0000-000000000000")
    with pytest.raises(InvalidRequestError) as invalid:
        client.agents.create({"model": dict(MODEL, max_tokens=0)})
    assert invalid.value.field == "model.max_tokens"


def test_a_send_retried_after_a_forced_connection_drop_gives_one_input(stack, client):
    agent = client.agents.create({"model": MODEL})
    upstream = stack.url.removeprefix("http://")
    keys: List[Optional[str]] = []
    dropped = threading.Event()

    class Proxy(http.server.BaseHTTPRequestHandler):
        """Forwards to the API; the first send's answer is thrown away and
        its connection closed, after the API has recorded the input."""

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path.endswith("/inputs"):
                keys.append(self.headers.get("idempotency-key"))
            connection = http.client.HTTPConnection(upstream)
            connection.request("POST", self.path, body, dict(self.headers))
            answer = connection.getresponse()
            payload = answer.read()
            if self.path.endswith("/inputs") and not dropped.is_set():
                dropped.set()
                self.close_connection = True
                return
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection"):
                    self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = serve(Proxy)
    try:
        with Holdfast(stack.key, f"http://127.0.0.1:{proxy.server_address[1]}", retry=FAST) as via_proxy:
            sent = via_proxy.send(agent["id"], "hello once")
        assert dropped.is_set()
        assert sent.replayed
        assert len(keys) == 2 and keys[0] == keys[1]
        inputs = [e for e in all_events(client, agent["id"]) if e["type"] == "input.received"]
        assert len(inputs) == 1
    finally:
        proxy.shutdown()


def test_a_stream_across_an_api_restart_yields_each_saved_event_once(stack, client):
    agent = client.agents.create({"model": MODEL})
    client.send(agent["id"], directive(say="one two three four five six seven eight nine ten", trickle_ms=150))
    items = []
    restarted = False
    for item in client.stream(agent["id"]):
        items.append(item)
        if item["type"] == "delta" and not restarted:
            stack.command("restart-api")
            restarted = True
        if item["type"] == "event" and item["event"]["type"] == "turn.completed":
            break
    assert restarted
    seqs = [i["event"]["seq"] for i in items if i["type"] == "event"]
    assert seqs == [e["seq"] for e in all_events(client, agent["id"])]
    assert any(i["type"] == "delta" for i in items)


def test_a_stream_delivers_the_thinking_deltas_of_a_model_call(client):
    agent = client.agents.create({"model": MODEL})
    client.send(agent["id"], "hi")
    thinking, ended = [], 0
    for item in client.stream(agent["id"]):
        if item["type"] == "thinking_delta":
            thinking.append(item["delta"]["text"])
        if item["type"] == "event" and item["event"]["type"] == "turn.completed":
            ended += 1
            if ended == 2:
                break
            # The stream is live now: the next call's deltas reach it.
            client.send(agent["id"], directive(think="Order 1001 left the depot on Monday.", say="shipped"))
    assert "".join(thinking) == "Order 1001 left the depot on Monday."
    [*_, response] = [e for e in all_events(client, agent["id"]) if e["type"] == "model.response"]
    assert response["type"] == "model.response"
    assert response["data"]["message"][0] == {"type": "thinking", "thinking": "".join(thinking), "signature": "sig"}


def test_pending_calls_are_re_read_after_a_reconnect_async(stack, client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    client.send(agent["id"], directive(call=[{"name": "lookup", "input": {"order": 1}}]))
    events = wait_for_event(client, agent["id"], "tool_call.created")
    call_id = next(e for e in events if e["type"] == "tool_call.created")["data"]["id"]

    async def run() -> int:
        seen = 0
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            # From after the call's event: only the re-read can show it.
            async for item in aclient.stream(agent["id"], after=events[-1]["seq"]):
                if item["type"] == "tool_call" and item["tool_call"]["id"] == call_id:
                    seen += 1
                    if seen == 1:
                        await asyncio.get_running_loop().run_in_executor(None, stack.command, "restart-api")
                    else:
                        return seen
        return seen

    assert asyncio.run(run()) == 2


def test_409_a_tool_result_the_same_output_is_success_another_a_conflict_with_the_state(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    client.send(agent["id"], directive(call=[{"name": "lookup", "input": {}}]))
    wait_until("a pending call", lambda: len(client.pending_tool_calls(agent["id"])) > 0)
    call = client.pending_tool_calls(agent["id"])[0]
    assert client.submit_tool_result(call["id"], {"status": "shipped"})["status"] == "completed"
    assert client.submit_tool_result(call["id"], {"status": "shipped"})["output"] == {"status": "shipped"}
    with pytest.raises(ConflictError) as conflict:
        client.submit_tool_result(call["id"], {"status": "lost"})
    assert conflict.value.status == 409
    assert conflict.value.current["output"] == {"status": "shipped"}


def test_409_approvals_and_questions(client):
    agent = client.agents.create(
        {"model": MODEL, "tools": [LOOKUP, {"type": "ask_user"}], "approvals": {"require_for": ["lookup"]}}
    )
    client.send(
        agent["id"],
        directive(call=[{"name": "lookup", "input": {}}, {"name": "ask_user", "input": {"question": "colour?"}}]),
    )
    wait_until("a pending approval", lambda: len(client.pending_approvals(agent["id"])) > 0)
    wait_until("a pending question", lambda: len(client.pending_questions(agent["id"])) > 0)
    approval = client.pending_approvals(agent["id"])[0]
    question = client.pending_questions(agent["id"])[0]
    assert client.approve(approval["id"], by="alice")["status"] == "approved"
    assert client.approve(approval["id"], by="bob")["status"] == "approved"
    with pytest.raises(ConflictError) as denied:
        client.deny(approval["id"], by="bob")
    assert denied.value.current["status"] == "approved"
    assert client.answer(question["id"], "blue", by="alice")["answer"] == "blue"
    assert client.answer(question["id"], "blue", by="bob")["answer"] == "blue"
    with pytest.raises(ConflictError) as red:
        client.answer(question["id"], "red", by="bob")
    assert red.value.current["answer"] == "blue"


def test_a_real_webhook_delivery_verifies_and_a_tampered_one_does_not(client):
    deliveries: List[Dict[str, Any]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            deliveries.append({"headers": dict(self.headers), "body": body})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    receiver = serve(Receiver)
    try:
        hook = client.webhooks.create(f"http://127.0.0.1:{receiver.server_address[1]}/hook", events=["input.received"])
        agent = client.agents.create({"model": MODEL})
        client.send(agent["id"], "hello hook")
        wait_until("a delivery for the agent", lambda: any(agent["id"].encode() in d["body"] for d in deliveries))
        delivery = next(d for d in deliveries if agent["id"].encode() in d["body"])
        event = verify_webhook(delivery["headers"], delivery["body"], hook["secret"])
        assert event["type"] == "input.received"
        assert event["agent_id"] == agent["id"]
        tampered = delivery["body"].replace(b"hello hook", b"hello hack")
        with pytest.raises(WebhookVerificationError):
            verify_webhook(delivery["headers"], tampered, hook["secret"])
        client.webhooks.delete(hook["id"])
    finally:
        receiver.shutdown()


def test_serve_tools_answers_a_custom_tool_call_exactly_once_across_a_worker_sigkill(stack, client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    runs: List[str] = []

    async def lookup(tool_input: Dict[str, Any], call: Dict[str, Any]) -> Dict[str, Any]:
        runs.append(call["id"])
        # Restart the API while the result is still to be posted.
        await asyncio.get_running_loop().run_in_executor(None, stack.command, "restart-api")
        return {"order": tool_input["order"], "status": "shipped"}

    async def run() -> Dict[str, Any]:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            serving = asyncio.ensure_future(AsyncToolServer(aclient, {"lookup": lookup}).serve(agent["id"]))
            await aclient.send(
                agent["id"],
                directive(
                    say="let me look that order up for you right now",
                    call=[{"name": "lookup", "input": {"order": 1001}}],
                    trickle_ms=150,
                ),
            )
            # Kill the worker while the model streams the call; another
            # worker makes the model call again.
            killed: Dict[str, Any] = {}
            async for item in aclient.stream(agent["id"]):
                if item["type"] == "delta":
                    killed = await asyncio.get_running_loop().run_in_executor(
                        None, stack.command, f"kill-lease-holder {agent['id']}"
                    )
                    break
            await asyncio.get_running_loop().run_in_executor(None, stack.command, "start-worker")
            async for event in aclient.events(agent["id"]):
                if event["type"] == "turn.completed":
                    break
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            return killed

    killed = asyncio.run(run())
    assert killed.get("killed")
    assert len(runs) == 1
    events = all_events(client, agent["id"])
    completed = [e for e in events if e["type"] == "tool_call.completed"]
    assert len(completed) == 1
    assert completed[0]["data"]["output"] == {"order": 1001, "status": "shipped"}
    responses = [e for e in events if e["type"] == "model.response"]
    assert "done:" in json.dumps(responses[-1]["data"])


def test_a_tool_server_fed_the_same_call_twice_runs_it_once(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    client.send(agent["id"], directive(call=[{"name": "lookup", "input": {}}]))
    created = next(e for e in wait_for_event(client, agent["id"], "tool_call.created") if e["type"] == "tool_call.created")
    pending = client.pending_tool_calls(agent["id"])[0]
    runs: List[str] = []
    server = ToolServer(client, {"lookup": lambda tool_input, call: runs.append(call["id"]) or "ok"})
    server.handle_event(created)
    server.handle_event(created)
    server.handle(pending)
    server.idle()
    assert len(runs) == 1
    assert client.pending_tool_calls(agent["id"]) == []


def test_serve_tools_runs_a_call_that_needs_approval_only_once_it_is_approved(stack, client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP], "approvals": {"require_for": ["lookup"]}})
    runs: List[str] = []

    async def run() -> None:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            serving = asyncio.ensure_future(
                AsyncToolServer(aclient, {"lookup": lambda tool_input, call: runs.append(call["id"]) or "ok"}).serve(
                    agent["id"]
                )
            )
            await aclient.send(agent["id"], directive(call=[{"name": "lookup", "input": {}}]))
            while not await aclient.pending_approvals(agent["id"]):
                await asyncio.sleep(0.05)
            assert runs == []
            approval = (await aclient.pending_approvals(agent["id"]))[0]
            await aclient.approve(approval["id"], by="alice")
            async for event in aclient.events(agent["id"]):
                if event["type"] == "turn.completed":
                    break
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            assert runs == [approval["tool_call_id"]]

    asyncio.run(run())


def test_the_example_tool_backend_answers_lookup_order_and_records_the_call(stack, client, tmp_path):
    from tool_backend import run_backend  # examples/python, on sys.path via conftest

    agent = client.agents.create(
        {"model": MODEL, "tools": [{"type": "custom", "name": "lookup_order", "input_schema": {"type": "object"}}]}
    )
    ledger = tmp_path / "ledger.jsonl"

    async def run() -> None:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            serving = asyncio.ensure_future(run_backend(aclient, agent["id"], ledger))
            await aclient.send(agent["id"], directive(call=[{"name": "lookup_order", "input": {"order": 7}}]))
            async for event in aclient.events(agent["id"]):
                if event["type"] == "turn.completed":
                    break
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)

    asyncio.run(run())
    completed = next(e for e in all_events(client, agent["id"]) if e["type"] == "tool_call.completed")
    assert completed["data"]["output"] == {"order": 7, "status": "shipped", "carrier": "DHL"}
    ids = [json.loads(line)["id"] for line in ledger.read_text().splitlines()]
    assert ids == [completed["data"]["tool_call_id"]]


def test_a_tool_server_fed_by_verified_webhook_deliveries_answers_the_call_once(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    runs: List[str] = []
    tools = ToolServer(client, {"lookup": lambda tool_input, call: runs.append(call["id"]) or "looked up"})
    secret: List[str] = []
    seen: set = set()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                event = verify_webhook(dict(self.headers), body, secret[0])
            except WebhookVerificationError:
                self.send_response(400)
                self.end_headers()
                return
            self.send_response(204)
            self.end_headers()
            # At least once: dedupe by webhook-id, then do the work after answering.
            if self.headers["webhook-id"] not in seen and event["agent_id"] == agent["id"]:
                seen.add(self.headers["webhook-id"])
                tools.handle_event(event)

        def log_message(self, *args: Any) -> None:
            pass

    receiver = serve(Receiver)
    try:
        hook = client.webhooks.create(f"http://127.0.0.1:{receiver.server_address[1]}/hook", events=["tool_call.created"])
        secret.append(hook["secret"])
        client.send(agent["id"], directive(call=[{"name": "lookup", "input": {}}]))
        events = wait_for_event(client, agent["id"], "turn.completed")
        tools.idle()
        assert len(runs) == 1
        assert len([e for e in events if e["type"] == "tool_call.completed"]) == 1
        client.webhooks.delete(hook["id"])
    finally:
        receiver.shutdown()


def test_the_sync_serve_tools_answers_a_call_and_stops_promptly(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    runs: List[str] = []
    stop = threading.Event()
    serving = threading.Thread(
        target=serve_tools,
        args=(client, agent["id"], {"lookup": lambda tool_input, call: runs.append(call["id"]) or {"n": 1}}),
        kwargs={"stop": stop},
    )
    serving.start()
    client.send(agent["id"], directive(call=[{"name": "lookup", "input": {}}]))
    events = wait_for_event(client, agent["id"], "turn.completed")
    stop.set()
    serving.join(timeout=2)
    assert not serving.is_alive()
    assert len(runs) == 1
    assert [e["data"]["output"] for e in events if e["type"] == "tool_call.completed"] == [{"n": 1}]
