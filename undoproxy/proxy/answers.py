"""The only responses undoproxy writes in the upstream's place, in the shapes the contract gives."""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import http

from undoproxy.proxy.budgets import OverBudget

JSON = {"Content-Type": "application/json", "Cache-Control": "no-store"}


def json_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> http.Response:
    """A JSON response from undoproxy itself (marked with X-Undoproxy: 1)."""
    return http.Response.make(
        status, json.dumps(body).encode(), {**JSON, "X-Undoproxy": "1", **(headers or {})}
    )


def reason_of(response: http.Response) -> str | None:
    """`reason (error)` of an answer undoproxy wrote itself (None for any other); not
    `error: reason`, which the redaction of free text reads as a secret-named field."""
    if response.headers.get("X-Undoproxy") != "1":
        return None
    try:
        body = json.loads(response.get_content(strict=False) or b"")
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return None
    words = body.get("reason") or body.get("message")
    return f"{words} ({body['error']})" if isinstance(words, str) and words else body["error"]


def proxy_auth_required(message: str) -> http.Response:
    """407: the session is unknown or its token is wrong (token mode)."""
    return json_response(
        407,
        {"error": "undoproxy_proxy_auth", "message": message},
        {"Proxy-Authenticate": 'Basic realm="undoproxy"'},
    )


def bad_request(message: str) -> http.Response:
    """400: a request undoproxy cannot forward as it was read (see proxy/fieldcheck.py)."""
    return json_response(400, {"error": "undoproxy_bad_request", "message": message})


def wrong_session(port_session: str, named: str) -> http.Response:
    """403: a request on one session's own port names another session (its credentials or its
    X-Undoproxy-Session header); filed under neither, forwarded nowhere."""
    return json_response(
        403,
        {
            "error": "undoproxy_wrong_session",
            "session": port_session,
            "named": named,
            "message": f"this port belongs to session {port_session!r}, but the request names "
            f"session {named!r}: use that session's own port or the main proxy port",
        },
    )


def blocked(rule: str, reason: str) -> http.Response:
    """403 for a request a rule denies outright."""
    return json_response(
        403,
        {"error": "undoproxy_blocked", "rule": rule, "reason": reason},
        {"X-Undoproxy-Decision": "denied"},
    )


def denied(
    rule: str | None, reason: str, approval_id: str, decision: str = "denied"
) -> http.Response:
    """403 for a held request a person denied, or nobody decided in time (decision=timeout)."""
    return json_response(
        403,
        {"error": "undoproxy_denied", "rule": rule, "reason": reason, "approval_id": approval_id},
        {"X-Undoproxy-Decision": decision},
    )


def session_closed(session_id: str, state: str) -> http.Response:
    """409: a mutation in a session that is committed or being (or was) rolled back."""
    return json_response(
        409,
        {
            "error": "undoproxy_session_closed",
            "session": session_id,
            "state": state,
            "message": f"session {session_id!r} is {state}: it takes no new mutations (they "
            "would land outside its rollback or commit); reads still pass",
            "fix": 'start the agent in a new session: eval "$(undoproxy env --session NEW_NAME)"',
        },
    )


def frozen(session_id: str, scope: str) -> http.Response:
    """403: the kill switch is on (for this session, or for all); nothing forwarded."""
    what = "every session is" if scope == "all" else f"session {session_id!r} is"
    return json_response(
        403,
        {
            "error": "undoproxy_frozen",
            "session": session_id,
            "scope": scope,
            "message": f"{what} frozen (the kill switch): mutations are refused until it is "
            "unfrozen; reads still pass",
            "fix": "wait for a person to turn the kill switch off: `undoproxy unfreeze "
            + ("--all`" if scope == "all" else f"{session_id}`"),
        },
        {"X-Undoproxy-Decision": "denied"},
    )


def over_budget(session_id: str, over: OverBudget) -> http.Response:
    """403: one more mutation would exceed a `guard:` budget; nothing forwarded."""
    return json_response(
        403,
        {
            "error": "undoproxy_budget",
            "limit": over.limit,
            "max": over.value,
            "scope": over.scope,
            "session": session_id,
            "reason": over.message(),
        },
        {"X-Undoproxy-Decision": "denied"},
    )


def journal_unavailable(detail: str) -> http.Response:
    """503: the mutation could not be written ahead, so it was not forwarded."""
    return json_response(
        503,
        {
            "error": "undoproxy_journal_unavailable",
            "message": "the request was not forwarded because undoproxy could not journal it first",
            "detail": detail,
        },
        {"Retry-After": "1"},
    )


def snapshot_failed(
    step_id: str, url: str, detail: str, challenge: str | None = None
) -> http.Response:
    """502: the snapshot before a mutation failed, so the mutation was not forwarded.

    With `challenge`: the agent sent no credentials and the upstream asked for them (401 to the
    snapshot); its `WWW-Authenticate` is passed on with a 401, so that a client that
    authenticates only when challenged (Basic, Digest: caldav, WebDAV clients) sends them.
    """
    return json_response(
        401 if challenge else 502,
        {
            "error": "undoproxy_snapshot_failed",
            "step": step_id,
            "snapshot_url": url,
            "message": "the request was not forwarded: "
            "undoproxy could not snapshot its target first",
            "detail": detail,
        },
        {"WWW-Authenticate": challenge} if challenge else None,
    )


def internal_error(step_id: str, forwarded: bool, upstream_status: int | None) -> http.Response:
    """502: undoproxy itself failed on this request (fail closed)."""
    body: dict[str, Any] = {
        "error": "undoproxy_internal_error",
        "step": step_id,
        "forwarded": forwarded,
        "message": (
            "undoproxy failed after the upstream answered; the request was sent"
            if forwarded
            else "the request was not forwarded because undoproxy failed while handling it"
        ),
    }
    if upstream_status is not None:
        body["upstream_status"] = upstream_status
    return json_response(502, body)


def body_too_large(limit: int, size: int, *, announced: bool) -> http.Response:
    """413: the request body is larger than `proxy.max_body`; nothing forwarded and the rest
    of the body not read (the connection is closed after this answer)."""
    said = f"announces {size} bytes" if announced else f"went past {limit} bytes"
    return json_response(
        413,
        {
            "error": "undoproxy_body_too_large",
            "limit": limit,
            "message": f"the request body {said}; undoproxy takes bodies of at most {limit} "
            "bytes (proxy.max_body), so it was not forwarded",
        },
        {"Connection": "close"},
    )


def cannot_spool(detail: str) -> http.Response:
    """507: a request body too large to hold could not be spooled to disk to be judged (the
    disk is full or refuses it); nothing forwarded."""
    return json_response(
        507,
        {
            "error": "undoproxy_spool_failed",
            "message": "the request body is too large to hold in memory and undoproxy could "
            "not spool it to disk to judge it, so it was not forwarded",
            "detail": detail,
        },
        {"Connection": "close"},
    )


def misdirected(status: int, reason: str, names: dict[str, str]) -> http.Response:
    """421 `undoproxy_misdirected`: the request names more than one host (URL, Host header,
    CONNECT target, TLS SNI), so the host rules would judge may not be the one the upstream
    serves; 400 `undoproxy_bad_host`: one of them is not a host, or Host is sent twice.
    Nothing is forwarded."""
    return json_response(
        status,
        {
            "error": "undoproxy_misdirected" if status == 421 else "undoproxy_bad_host",
            "names": names,
            "message": f"{reason}; undoproxy forwards a request only when every name it "
            "carries is the same host",
        },
    )


def secret_refused(error: str, secret: str, message: str, status: int = 403) -> http.Response:
    """403 `undoproxy_secret_in_agent` (the agent sent a real value of a `secrets:` entry: it
    was not supposed to have it), 403 `undoproxy_secret_not_allowed` (its placeholder, from a
    session the entry does not serve), 400 `undoproxy_secret_unsupported` (a request that
    cannot carry the secret). Nothing is forwarded; the secret is named, its value never."""
    return json_response(
        status,
        {"error": error, "secret": secret, "message": message},
        {"X-Undoproxy-Decision": "denied"},
    )


def not_http(reason: str) -> bytes:
    """The raw HTTP/1.1 400 that refuses a connection whose bytes are not HTTP: nothing of it
    is relayed (written as bytes: there is no HTTP flow to answer on)."""
    body = json.dumps({"error": "undoproxy_not_http", "message": reason}).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        "Content-Type: application/json\r\n"
        "Cache-Control: no-store\r\n"
        "X-Undoproxy: 1\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
