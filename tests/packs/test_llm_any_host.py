"""A model server of your own is an LLM too: the llm pack recognises LLM APIs by path and body
shape on any host, with no `hosts:` of the user's, and a streamed answer is journaled once
complete with its length, SHA-256 and first bytes.

The fake LLM API (tests/support/llm.py) on plain HTTP at 127.0.0.1 stands for a self-hosted
server (vLLM, llama.cpp, Ollama on another port); undoproxy runs with the built-in packs as
they ship and `defaults.mutations: hold`, so a call that comes back at once was a read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support import llm
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.config import load_config
from undoproxy.rules import RequestView


@pytest.fixture(scope="module")
def model_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer(llm.create_app()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"defaults": {"mutations": "hold"}, "approvals": {"timeout": "60s"}}
    instance = Undoproxy(tmp_path_factory.mktemp("llm-any-host"), config).start()
    yield instance
    instance.stop()


def _http(proxy: Undoproxy, session: str) -> httpx.Client:
    return httpx.Client(proxy=proxy.proxy_url(session), timeout=30, trust_env=False)


def test_a_streamed_chat_to_a_self_hosted_server_is_a_journaled_read(
    proxy: Undoproxy, model_server: ThreadedServer, session_id: str
) -> None:
    client = openai.OpenAI(
        base_url=f"{model_server.base_url}/v1",
        api_key="local",
        max_retries=0,
        http_client=_http(proxy, session_id),
    )
    stream = client.chat.completions.create(
        model="llama-3-8b",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello from the fake"
    [step] = proxy.steps(session_id)
    assert (step["kind"], step["rule"], step["status"]) == ("read", "llm/any-chat", "succeeded")
    assert step["meta"]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 4,
        "total_tokens": 15,
    }
    assert step["meta"]["stream"]["complete"] is True
    assert step["meta"]["stream"]["length"] == step["response"]["body_length"] > 0
    assert "chat.completion.chunk" in step["response"]["body"]
    # Nothing to undo: the session rolls back clean.
    report = proxy.rollback(session_id)
    assert (report["state"], report["steps"]) == ("rolled_back", [])


def test_the_journal_keeps_the_streams_exact_length_and_hash(
    proxy: Undoproxy, model_server: ThreadedServer, session_id: str
) -> None:
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with (
        _http(proxy, session_id) as http,
        http.stream("POST", f"{model_server.base_url}/v1/chat/completions", json=body) as r,
    ):
        raw = b"".join(r.iter_raw())
    [step] = proxy.steps(session_id)
    assert step["meta"]["stream"] == {
        "length": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "complete": True,
    }


def test_ollama_on_another_port_is_an_llm(
    proxy: Undoproxy, model_server: ThreadedServer, session_id: str
) -> None:
    body = {"model": "llama3", "messages": [{"role": "user", "content": "hi"}]}
    with _http(proxy, session_id) as http:
        r = http.post(f"{model_server.base_url}/api/chat", json=body)
    assert r.status_code == 200
    [step] = proxy.steps(session_id)
    assert (step["kind"], step["rule"]) == ("read", "llm/any-ollama-chat")
    assert step["meta"]["model"] and step["meta"]["usage"]


RULES = load_config(None).rules


@pytest.mark.parametrize(
    ("path", "body", "rule"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": []}, "llm/any-chat"),
        ("/openai/v1/chat/completions", {"model": "m", "messages": []}, "llm/any-chat"),
        ("/v1/completions", {"model": "m", "prompt": "x"}, "llm/any-completions"),
        ("/v1/embeddings", {"model": "m", "input": "x"}, "llm/any-embeddings"),
        ("/v1/responses", {"model": "m", "input": "x"}, "llm/any-responses"),
        ("/v1/messages", {"model": "m", "messages": [], "max_tokens": 9}, "llm/any-messages"),
        ("/v1beta/models/gemma:generateContent", {"contents": []}, "llm/any-gemini"),
        ("/api/generate", {"model": "m", "prompt": "x"}, "llm/any-ollama-generate"),
        ("/api/embed", {"model": "m", "input": "x"}, "llm/any-ollama-embed"),
        # The path alone is not enough: what is posted must look like a model call.
        ("/v1/chat/completions", {"messages": []}, None),
        ("/chat/completions", {"title": "a chat app's message", "text": "hi"}, None),
        ("/api/chat", {"room": "general", "text": "hi"}, None),
        ("/v1/messages", {"to": "ann", "text": "hi"}, None),
    ],
)
def test_llm_calls_are_recognised_by_path_and_body_shape_on_any_host(
    path: str, body: dict[str, Any], rule: str | None
) -> None:
    view = RequestView.from_parts(
        "POST", f"http://models.internal:8000{path}", {}, json.dumps(body).encode()
    )
    found = RULES.match(view)
    assert (found.rule.name if found is not None else None) == rule
    if found is not None:
        assert found.rule.kind == "read"
