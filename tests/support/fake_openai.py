"""A fake of the OpenAI API that accepts one API key only, for the credential broker's tests.

`POST /v1/chat/completions` answers a `chat.completion`; `POST /v1/files` (multipart, as the
SDK uploads) stores a file and answers its object (`id` "file-N"); `GET /v1/files/{id}` and
`DELETE /v1/files/{id}` read and delete it (404 `{"error": ...}` once gone). Every request
without `Authorization: Bearer <key>` gets 401, as OpenAI answers a wrong key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class OpenAIState:
    """The key it accepts, the files it holds and every (method, path, Authorization) it got."""

    key: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1
    log: list[tuple[str, str, str]] = field(default_factory=list)


STATE: web.AppKey[OpenAIState] = web.AppKey("openai", OpenAIState)


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


@web.middleware
async def _auth(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[STATE]
    given = request.headers.get("Authorization", "")
    state.log.append((request.method, request.path, given))
    if given != f"Bearer {state.key}":
        return _error(401, "Incorrect API key provided", "invalid_request_error")
    return await handler(request)


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model", "gpt-4o-mini"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello from the fake"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }
    )


async def upload(request: web.Request) -> web.Response:
    state = request.app[STATE]
    form = await request.post()
    upload = form.get("file")
    size = len(upload.file.read()) if isinstance(upload, web.FileField) else 0
    file_id = f"file-{state.next_id}"
    state.next_id += 1
    state.files[file_id] = {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": 1,
        "filename": upload.filename if isinstance(upload, web.FileField) else "upload",
        "purpose": str(form.get("purpose", "assistants")),
        "status": "processed",
    }
    return web.json_response(state.files[file_id])


async def read(request: web.Request) -> web.Response:
    found = request.app[STATE].files.get(request.match_info["id"])
    if found is None:
        return _error(404, "No such File object", "invalid_request_error")
    return web.json_response(found)


async def delete(request: web.Request) -> web.Response:
    file_id = request.match_info["id"]
    if request.app[STATE].files.pop(file_id, None) is None:
        return _error(404, "No such File object", "invalid_request_error")
    return web.json_response({"id": file_id, "object": "file", "deleted": True})


def create_app(state: OpenAIState) -> web.Application:
    """The fake over `state`."""
    app = web.Application(middlewares=[_auth])
    app[STATE] = state
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/files", upload)
    app.router.add_get("/v1/files/{id}", read)
    app.router.add_delete("/v1/files/{id}", delete)
    return app
