"""The credential broker at the proxy: real secrets go upstream, never to the agent or journal.

Two addons, at the two ends of the chain (server.py):

`KeepSecretsFromAgent` runs right after the bodies are decoded, before the rules. It refuses,
answering the agent itself and forwarding nothing,
- a request that carries a real value of a `secrets:` entry, anywhere (a header, the URL, the
  body, the intent): 403 `undoproxy_secret_in_agent`. The agent was not supposed to have it;
  the value is cut out of the request before the journal records the refusal;
- a placeholder sent to an entry's host from a session the entry does not serve: 403
  `undoproxy_secret_not_allowed` (undoproxy would not put the secret in);
- an AWS request whose body chunks are signed with the agent's key (aws-chunked,
  `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`): 400 `undoproxy_secret_unsupported`, since the chunk
  signatures cannot be made again with another key.
Once the request went upstream it puts back the request as the agent sent it (placeholders),
so that what is journaled after the answer (reads are written then) never holds a secret
(`steps.new_step` also records the agent's version while the secrets are in, for a failure in
between), and in a buffered answer that echoes a secret it puts the placeholder in its place.

`InjectSecrets` runs last, after the journal wrote the request ahead, with no await before
mitmproxy forwards it: it sets each entry's header to the real value (whatever the agent sent
there: nothing, a placeholder) and, for `aws:`, signs the request again with the real key.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from mitmproxy import http

from undoproxy import redact
from undoproxy.broker import Broker, Found
from undoproxy.proxy import answers
from undoproxy.proxy.bodies import (
    replace_spooled_head,
    request_body,
    response_body,
    spooled,
    spooled_pieces,
)
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.signing import SIGNED_CHUNKS, canonical_query

log = logging.getLogger(__name__)
# Bytes each piece of a spooled body repeats from the one before when it is searched for
# secrets: a value up to this long (the largest a secret may be) is found across the edge of
# two pieces.
NEEDLE_OVERLAP = 64 * 1024
# What the agent's signature leaves that undoproxy's replaces (sign_v4 sets the same ones).
_SIGNATURE_HEADERS = ("Authorization", "X-Amz-Date", "X-Amz-Content-Sha256", "X-Amz-Security-Token")


def _cut(name: str) -> str:
    return f"[secret {name}]"


class KeepSecretsFromAgent:
    """Refuses what an agent must not send; keeps secrets out of what it and the journal see.
    Needs the decoded body (proxy/bodies.py); runs before the gate."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def foresee(self, flow: http.HTTPFlow) -> str | None:
        """Why a large upload must be read before it is judged (proxy/upload_plan.py): every
        body is searched for the brokered secrets' real values, and a body signed again by
        its hash."""
        if self.broker.entries:
            return "brokered secrets (secrets:) are searched for in every body"
        return None

    async def request(self, flow: http.HTTPFlow) -> None:
        """Refuse a real value, a placeholder out of scope, or signed body chunks."""
        state = state_of(flow)
        if state is None or flow.response is not None or not self.broker.entries:
            return
        request = flow.request
        found = self.broker.find(self._places(flow, state))
        if found is None and spooled(flow) is not None:
            # A body too large to hold was spooled to disk: read it back, off the event loop.
            pieces = (("the body", p) for p in spooled_pieces(flow, NEEDLE_OVERLAP))
            found = await asyncio.to_thread(self.broker.find, pieces)
        if found is not None:
            self._cut_out(flow, state)
            self._refuse(
                flow,
                state,
                answers.secret_refused(
                    "undoproxy_secret_in_agent",
                    found.secret,
                    f"the request carries the real value of secret {found.secret} in "
                    f"{found.where}; agents hold only placeholders (undoproxy env), so it was "
                    "not forwarded",
                ),
                found,
            )
            return
        headers = [v for _, v in request.headers.items(multi=True)]
        misused = self.broker.misused_placeholder(request.url, state.session_id, headers)
        if misused is not None:
            message = (
                f"session {state.session_id!r} may not use secret {misused} (its sessions: "
                "in config.yaml), so undoproxy would not put it in; nothing was forwarded"
            )
            self._refuse(
                flow,
                state,
                answers.secret_refused("undoproxy_secret_not_allowed", misused, message),
            )
            return
        injection = self.broker.for_request(request.url, state.session_id)
        sha = request.headers.get("x-amz-content-sha256", "")
        if injection.signer is not None and sha.startswith(SIGNED_CHUNKS):
            message = (
                "the body is sent in chunks signed with the agent's key (aws-chunked, "
                f"{SIGNED_CHUNKS}), which undoproxy cannot sign again with the real key; "
                "send it over HTTPS (SDKs then leave the payload unsigned)"
            )
            self._refuse(
                flow,
                state,
                answers.secret_refused(
                    "undoproxy_secret_unsupported", injection.names[0], message, 400
                ),
            )

    @staticmethod
    def _places(flow: http.HTTPFlow, state: FlowState) -> list[tuple[str, str | bytes]]:
        """Everything of the request an agent could put a secret in, and what to call it."""
        request = flow.request
        places: list[tuple[str, str | bytes]] = [
            (f"the {name} header", value) for name, value in request.headers.items(multi=True)
        ]
        places += [("the URL", request.url), ("the URL", unquote(request.url))]
        if state.intent:
            places.append(("the X-Undoproxy-Intent header", state.intent))
        raw = request.raw_content or b""
        places.append(("the body", raw))
        decoded = request_body(flow, state).body
        if decoded is not raw:
            places.append(("the body", decoded))
        return places

    def _cut_out(self, flow: http.HTTPFlow, state: FlowState) -> None:
        """Take every real value out of the refused request, so that the journal records
        where it was and never what it was."""
        broker, request = self.broker, flow.request
        request.headers.fields = tuple(
            (k, broker.scrub_bytes(v, _cut)) for k, v in request.headers.fields
        )
        host = broker.scrub(request.host, lambda name: f"secret-{name}")
        if host != request.host:
            request.host = host
        path = broker.scrub(request.path, _cut)
        if broker.scrub(unquote(path), _cut) != unquote(path):  # encoded some other way
            path = broker.scrub(unquote(path), _cut)
        request.path = path
        if state.intent:
            state.intent = broker.scrub(state.intent)
        raw = request.raw_content or b""
        decoded = request_body(flow, state).body
        copy = spooled(flow)
        if copy is not None:  # the journal keeps its first bytes: never a secret in them
            replace_spooled_head(flow, broker.scrub_bytes(copy.head, _cut))
        if broker.find([("", raw)]) is not None:
            _set_body(request, broker.scrub_bytes(raw, _cut))
        elif decoded is not raw and broker.find([("", decoded)]) is not None:
            request.headers.pop("content-encoding", None)
            _set_body(request, broker.scrub_bytes(decoded, _cut))
        state.request_body = None  # decoded again from what is left, if anyone asks

    @staticmethod
    def _refuse(
        flow: http.HTTPFlow, state: FlowState, answer: http.Response, found: Found | None = None
    ) -> None:
        state.answered = True
        flow.response = answer
        log.warning(
            "refused %s %s (session %s): %s",
            flow.request.method,
            redact.url(flow.request.url),
            state.session_id,
            answer.get_text(strict=False) if found is None else f"real value in {found.where}",
        )

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """The request went upstream: put back what the agent sent (placeholders)."""
        _as_agent_sent(flow)

    def response(self, flow: http.HTTPFlow) -> None:
        """Put back the agent's request; replace a secret the upstream echoed."""
        state = _as_agent_sent(flow)
        response = flow.response
        if state is None or not state.brokered or response is None or response.stream:
            return

        def placeholder(name: str) -> str:
            return self.broker.placeholder_of(name)

        fields = tuple(
            (k, self.broker.scrub_bytes(v, placeholder)) for k, v in response.headers.fields
        )
        if fields != response.headers.fields:
            response.headers.fields = fields
        raw = response.raw_content or b""
        if self.broker.find([("", raw)]) is not None:
            _set_body(response, self.broker.scrub_bytes(raw, placeholder))
            state.response_body = None
            return
        decoded = response_body(flow, state)
        if (
            decoded is not None
            and decoded.problem is None
            and decoded.body is not raw
            and self.broker.find([("", decoded.body)]) is not None
        ):
            response.content = self.broker.scrub_bytes(decoded.body, placeholder)
            state.response_body = None

    def error(self, flow: http.HTTPFlow) -> None:
        """The upstream failed: put back the agent's request all the same."""
        _as_agent_sent(flow)


class InjectSecrets:
    """Puts the real secrets into a request right before it is forwarded. Runs after the
    journal addon (the write-ahead entry holds the agent's placeholders) and must not await."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def request(self, flow: http.HTTPFlow) -> None:
        """Set each entry's header; sign an `aws:` host's request again with the real key."""
        state = state_of(flow)
        if state is None or flow.response is not None or not self.broker.entries:
            return
        request = flow.request
        injection = self.broker.for_request(request.url, state.session_id)
        if not injection:
            return
        state.as_agent_sent = (request.headers.fields, request.path, request.url)
        for name, value in injection.headers.items():
            request.headers[name] = value
        if injection.signer is not None:
            copy = spooled(flow)
            _sign(request, self.broker, injection.signer, copy.sha256 if copy else None)
        state.brokered = injection.names
        self.broker.count(injection.names, "agent")


def _sign(request: http.Request, broker: Broker, signer: Any, spooled_sha: str | None) -> None:
    """Sign `request` again with `signer`'s key: its signature headers and its query (made
    canonical, a presigned URL's signature dropped) replaced; Host set where it is sent. A
    spooled body (proxy/bounded.py) is signed by its hash: it is not in memory."""
    headers = {k: v for k, v in request.headers.items()}
    url, signed = broker.signers.sign(
        request.method,
        request.url,
        headers,
        request.raw_content,
        entry=signer,
        payload_sha256=spooled_sha,
    )
    for name in _SIGNATURE_HEADERS:
        value = next((v for k, v in signed.items() if k.lower() == name.lower()), None)
        if value is None:
            request.headers.pop(name, None)
        else:
            request.headers[name] = value
    if "host" in request.headers:
        request.headers["Host"] = signed["Host"]
    parts = urlsplit(url)
    query = urlsplit(request.url).query
    if canonical_query(query) != query:
        request.path = parts.path + (f"?{parts.query}" if parts.query else "")


def _as_agent_sent(flow: http.HTTPFlow) -> FlowState | None:
    """Put back the request's headers and path as the agent sent them (once it went)."""
    state = state_of(flow)
    if state is not None and state.as_agent_sent is not None:
        flow.request.headers.fields, flow.request.path, _ = state.as_agent_sent
        state.as_agent_sent = None
    return state


def _set_body(message: http.Message, data: bytes) -> None:
    """Replace a body as it is sent (no coding applied), its Content-Length kept true."""
    message.raw_content = data
    if "content-length" in message.headers and "transfer-encoding" not in message.headers:
        message.headers["content-length"] = str(len(data))
