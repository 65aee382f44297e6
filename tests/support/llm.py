"""A fake LLM API that answers as OpenAI's and Anthropic's documented endpoints do.

- `POST /v1/chat/completions`: a `chat.completion`, or with `stream: true` server-sent
  `chat.completion.chunk` events, the final one with `choices: []` and `usage` when
  `stream_options.include_usage` is set, then `data: [DONE]`.
- `POST /v1/embeddings`: a `list` of embeddings with `usage`.
- `POST /v1/messages`: an Anthropic `message`, or with `stream: true` the documented event
  sequence: message_start (usage.input_tokens), content_block_start, ping,
  content_block_delta..., content_block_stop, message_delta (usage.output_tokens),
  message_stop.
- `POST /v1beta/models/{model}:generateContent` / `:streamGenerateContent?alt=sse`: Gemini's
  answer, or its chunks as server-sent events, each with the running `usageMetadata`.
- `POST /api/chat`: Ollama's NDJSON stream, the last object `done: true` with token counts.

A request with header `X-Test-Gate: NAME` streams its first event, then waits until
`POST /release?gate=NAME` before sending the rest: a buffering proxy delivers nothing first.
With `X-Test-Compress: gzip` a stream is sent gzip-compressed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

GATES: web.AppKey[dict[str, asyncio.Event]] = web.AppKey("llm_gates", dict)
CALLS: web.AppKey[list[dict[str, Any]]] = web.AppKey("llm_calls", list)
WORDS = ["Hello", " from", " the", " fake"]


def _gate(request: web.Request) -> asyncio.Event | None:
    name = request.headers.get("X-Test-Gate")
    return request.app[GATES].setdefault(name, asyncio.Event()) if name else None


async def _stream(
    request: web.Request, content_type: str, events: list[bytes]
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": content_type, "Cache-Control": "no-cache"}
    )
    if request.headers.get("X-Test-Compress") == "gzip":
        response.enable_compression(web.ContentCoding.gzip)
    await response.prepare(request)
    gate = _gate(request)
    for i, event in enumerate(events):
        await response.write(event)
        if i == 0 and gate is not None:
            await asyncio.wait_for(gate.wait(), 30)
    await response.write_eof()
    return response


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[CALLS].append(body)
    model = body["model"]
    usage = {"prompt_tokens": 11, "completion_tokens": len(WORDS), "total_tokens": 11 + len(WORDS)}
    base = {"id": "chatcmpl-fake1", "created": 1700000000, "model": f"{model}-2024-08-06"}
    if not body.get("stream"):
        return web.json_response(
            {
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(WORDS)},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            }
        )
    chunk = {**base, "object": "chat.completion.chunk"}
    events = [
        _sse({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    ]
    for word in WORDS:
        events.append(_sse({**chunk, "choices": [{"index": 0, "delta": {"content": word}}]}))
    events.append(_sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(_sse({**chunk, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return await _stream(request, "text/event-stream", events)


async def embeddings(request: web.Request) -> web.Response:
    body = await request.json()
    request.app[CALLS].append(body)
    return web.json_response(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "model": body["model"],
            "usage": {"prompt_tokens": 3, "total_tokens": 3},
        }
    )


async def messages(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[CALLS].append(body)
    model = body["model"]
    message = {
        "id": "msg_fake1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
    }
    if not body.get("stream"):
        return web.json_response(
            {
                **message,
                "content": [{"type": "text", "text": "".join(WORDS)}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 25, "output_tokens": len(WORDS)},
            }
        )
    events = [
        _sse(
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                },
            },
            "message_start",
        ),
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        _sse({"type": "ping"}, "ping"),
    ]
    for word in WORDS:
        events.append(
            _sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": word},
                },
                "content_block_delta",
            )
        )
    events += [
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(WORDS)},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]
    return await _stream(request, "text/event-stream", events)


async def ollama_chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[CALLS].append(body)
    lines = [
        json.dumps(
            {"model": body["model"], "message": {"role": "assistant", "content": w}, "done": False}
        )
        for w in WORDS
    ]
    lines.append(
        json.dumps(
            {"model": body["model"], "done": True, "prompt_eval_count": 9, "eval_count": len(WORDS)}
        )
    )
    return await _stream(
        request, "application/x-ndjson", [(line + "\n").encode() for line in lines]
    )


async def gemini(request: web.Request) -> web.StreamResponse:
    """`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`."""
    body = await request.json()
    request.app[CALLS].append(body)
    model, _, method = request.match_info["call"].partition(":")
    usage = {"promptTokenCount": 7, "candidatesTokenCount": len(WORDS), "totalTokenCount": 11}

    def chunk(text: str, counts: dict[str, int]) -> dict[str, Any]:
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
            "usageMetadata": counts,
            "modelVersion": f"{model}-001",
        }

    if method == "generateContent":
        return web.json_response(chunk("".join(WORDS), usage))
    if method != "streamGenerateContent":
        raise web.HTTPNotFound()
    events = [
        _sse(chunk(w, {**usage, "candidatesTokenCount": i + 1, "totalTokenCount": 8 + i}))
        for i, w in enumerate(WORDS[:-1])
    ]
    events.append(_sse(chunk(WORDS[-1], usage)))
    return await _stream(request, "text/event-stream", events)


async def release(request: web.Request) -> web.Response:
    request.app[GATES].setdefault(request.query["gate"], asyncio.Event()).set()
    return web.json_response({"released": request.query["gate"]})


def create_app() -> web.Application:
    """The fake LLM API."""
    app = web.Application()
    app[GATES] = {}
    app[CALLS] = []
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/api/chat", ollama_chat)
    app.router.add_post("/v1beta/models/{call}", gemini)
    app.router.add_post("/release", release)
    return app
