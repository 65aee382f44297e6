"""One JSON error shape for every admin endpoint: `{"error": code, "message": text}`."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """An error answered to the caller with its status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> web.Response:
    """The JSON error every endpoint uses."""
    return web.Response(
        status=status,
        content_type="application/json",
        text=json.dumps({"error": code, "message": message}),
    )


_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
}


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn ApiError and aiohttp's own HTTP errors into the one JSON shape."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, _CODES.get(exc.status, "error"), exc.reason)
    except Exception:
        log.exception("admin API error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "undoproxy hit an internal error; see its log")


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice (which one counts is ambiguous)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def parse_json(text: str) -> Any:
    """JSON text as a value; raises ValueError on bad JSON or a key repeated in any object.

    A repeated key is refused rather than read last-wins: a reader that takes the first one
    (a rule, a log, a person) would see a different request than the one acted on.
    """
    return json.loads(text, object_pairs_hook=_no_duplicates)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty); 400 when it is not exactly one JSON
    object with distinct keys."""
    if not request.body_exists:
        return {}
    try:
        value = parse_json(await request.text())
    except DuplicateKeyError as exc:
        raise ApiError(400, "bad_request", f"the body repeats the key {exc.args[0]!r}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "bad_request", "the body must be JSON") from None
    if not isinstance(value, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    return value


def json_bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    """`body[name]` as a boolean (`default` when absent or null); 400 unless it is a JSON
    `true`/`false`: `"false"`, `0` or `"no"` are refused, never guessed."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(
            400, "bad_request", f"{name} must be true or false (a JSON boolean), got {value!r}"
        )
    return value
