"""The llm pack, as a user meets it: the vendors' SDKs through a real `undoproxy run`.

The fake LLM API (tests/support/llm.py) answers under 127.0.0.1:PORT; the config puts the llm
pack on that host with `packs: [{name: llm, hosts: [...]}]`, exactly the override a user
writes for a self-hosted gateway. `defaults.mutations: hold` holds every unmatched POST, so
an LLM call that comes back at all was not held.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import requests

from tests.support import llm
from tests.support.certs import self_signed, server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def recorded(step: dict[str, Any]) -> dict[str, Any]:
    """What the rule's `record:` kept: the step's meta without what undoproxy keeps of every
    streamed answer (`stream`) and of every MCP exchange (`mcp`)."""
    return {k: v for k, v in (step["meta"] or {}).items() if k not in ("stream", "mcp")}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    ctx = server_context(self_signed(tmp_path_factory.mktemp("llm-cert")))
    server = ThreadedServer(llm.create_app(), ctx).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, fake: ThreadedServer) -> Iterator[Undoproxy]:
    config = {
        "defaults": {"mutations": "hold"},
        "approvals": {"timeout": "60s"},
        "packs": [{"name": "llm", "hosts": [f"127.0.0.1:{fake.port}"]}],
    }
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-llm"), config).start()
    yield instance
    instance.stop()


def _http(proxy: Undoproxy, session: str) -> httpx.Client:
    return httpx.Client(proxy=proxy.proxy_url(session), verify=proxy.ca_bundle, timeout=30)


def _openai(proxy: Undoproxy, fake: ThreadedServer, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{fake.base_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=_http(proxy, session),
    )


def _anthropic(proxy: Undoproxy, fake: ThreadedServer, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=fake.base_url,
        api_key="sk-ant-test",
        max_retries=0,
        http_client=_http(proxy, session),
    )


def _release(fake: ThreadedServer, gate: str) -> None:
    requests.post(f"{fake.base_url}/release", params={"gate": gate}, verify=False, timeout=10)


@pytest.fixture
def session() -> str:
    return f"llm-{uuid.uuid4().hex[:10]}"


def test_openai_chat_is_a_read_with_model_and_usage(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    client = _openai(proxy, fake, session)
    answer = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content == "Hello from the fake"
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"], step["status"]) == ("read", "llm/openai-chat", "succeeded")
    assert step["compensation"] is None
    assert recorded(step) == {
        "model": "gpt-4o-2024-08-06",
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
    }


def test_openai_stream_is_live_and_records_the_final_usage(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    gate = uuid.uuid4().hex
    client = _openai(proxy, fake, session)
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Test-Gate": gate},
    )
    chunks = iter(stream)
    # The fake sends the rest only once released: a buffering proxy delivers nothing here.
    first = next(chunks)
    assert first.choices[0].delta.role == "assistant"
    _release(fake, gate)
    rest = list(chunks)
    assert "".join(c.choices[0].delta.content or "" for c in rest if c.choices) == (
        "Hello from the fake"
    )
    assert rest[-1].usage is not None and rest[-1].usage.total_tokens == 15
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"], step["action"]) == ("read", "llm/openai-chat", "allow")
    assert step["meta"]["model"] == "gpt-4o-mini-2024-08-06"
    assert step["meta"]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 4,
        "total_tokens": 15,
    }


def test_a_gzip_compressed_stream_still_records_its_usage(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    stream = _openai(proxy, fake, session).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Test-Compress": "gzip"},
    )
    assert list(stream)[-1].usage is not None
    [step] = proxy.steps(session)
    assert ["Content-Encoding", "gzip"] in step["response"]["headers"]
    assert step["meta"]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 4,
        "total_tokens": 15,
    }


def test_openai_embeddings(proxy: Undoproxy, fake: ThreadedServer, session: str) -> None:
    client = _openai(proxy, fake, session)
    result = client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert result.data[0].embedding == [0.1, 0.2, 0.3]
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "llm/openai-embeddings")
    assert recorded(step) == {
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }


def test_anthropic_message(proxy: Undoproxy, fake: ThreadedServer, session: str) -> None:
    client = _anthropic(proxy, fake, session)
    message = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text"
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "llm/anthropic-messages")
    assert recorded(step) == {
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 25, "output_tokens": 4},
    }


def test_anthropic_stream_is_live_and_merges_start_and_final_usage(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    gate = uuid.uuid4().hex
    client = _anthropic(proxy, fake, session)
    with client.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Test-Gate": gate},
    ) as stream:
        events = iter(stream)
        assert next(events).type == "message_start"
        _release(fake, gate)
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        final = stream.get_final_message()
    assert text == "Hello from the fake"
    assert final.usage.output_tokens == 4
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "llm/anthropic-messages")
    assert recorded(step) == {
        "model": "claude-haiku-4-5",
        "usage": {"input_tokens": 25, "output_tokens": 4},
    }


def test_gemini_stream_records_the_last_usage_metadata(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    gate = uuid.uuid4().hex
    url = f"{fake.base_url}/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
    with proxy.agent(session, headers={"X-Test-Gate": gate}) as s:
        r = s.post(url, json={"contents": [{"parts": [{"text": "hi"}]}]}, stream=True, timeout=30)
        lines = (line for line in r.iter_lines() if line)
        assert b'"Hello"' in next(lines)
        _release(fake, gate)
        rest = list(lines)
    assert len(rest) == 3
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "llm/gemini-stream")
    assert recorded(step) == {
        "model": "gemini-2.0-flash-001",
        "usage": {"promptTokenCount": 7, "candidatesTokenCount": 4, "totalTokenCount": 11},
    }


def test_ollama_ndjson_stream_is_live_and_records_counts(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    gate = uuid.uuid4().hex
    with proxy.agent(session, headers={"X-Test-Gate": gate}) as s:
        r = s.post(
            f"{fake.base_url}/api/chat",
            json={"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]},
            stream=True,
            timeout=30,
        )
        lines = r.iter_lines()
        assert b'"Hello"' in next(lines)
        _release(fake, gate)
        rest = [line for line in lines if line]
    assert b'"done": true' in rest[-1]
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "llm/ollama-chat")
    assert recorded(step) == {
        "model": "llama3.2",
        "usage": {"prompt_eval_count": 9, "eval_count": 4},
    }


def test_llm_calls_are_left_alone_by_rollback(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    _openai(proxy, fake, session).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    _anthropic(proxy, fake, session).messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    calls = len(fake.app[llm.CALLS])
    report = proxy.rollback(session)
    assert report["state"] == "rolled_back"
    assert report["steps"] == []  # reads are never part of a rollback report
    assert len(fake.app[llm.CALLS]) == calls  # nothing was sent to the LLM provider
    shown = proxy.cli("show", session)
    assert "llm/openai-chat" in shown.stdout and "llm/anthropic-messages" in shown.stdout


def test_the_same_call_without_the_pack_is_a_held_mutation(
    tmp_path: Path, fake: ThreadedServer, session: str
) -> None:
    """Control: `packs: []` turns the llm pack off, and the same call is held."""
    bare = Undoproxy(tmp_path, {"defaults": {"mutations": "hold"}, "packs": []}).start()
    try:
        result: dict[str, Any] = {}

        def call() -> None:
            try:
                _openai(bare, fake, session).chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
                )
            except openai.APIStatusError as exc:
                result["status"] = exc.status_code

        agent = threading.Thread(target=call, daemon=True)
        agent.start()
        for _ in range(200):
            pending = bare.api("GET", "/api/approvals?state=pending").json()["approvals"]
            if pending:
                break
            threading.Event().wait(0.05)
        [approval] = pending
        bare.api("POST", f"/api/approvals/{approval['id']}/deny", json={"reason": "test"})
        agent.join(30)
        assert result == {"status": 403}
    finally:
        bare.stop()
