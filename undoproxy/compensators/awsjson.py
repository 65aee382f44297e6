"""What the AWS JSON services share (DynamoDB, Secrets Manager, SSM, SQS): every call is
`POST /` with `X-Amz-Target: Service.Action` and an `application/x-amz-json-1.x` body, signed
(SigV4) with the key `signing:` gives undoproxy for the host (pure).

Reads before a write and read-backs are other actions of the same service (GetItem,
GetSecretValue, GetParameter, GetQueueAttributes) sent the same way; an AWS JSON API answers
"no such thing" with HTTP 400 and a `__type` naming the error, which a read declares
(`ABSENT`) so that it is taken for absence, never for a failed read.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import Facts, Irreversible, PreRead, Snapshot, parse_json
from undoproxy.compensators.model import inverse_request as request

# The errors by which AWS JSON APIs say the thing asked for does not exist.
NOT_FOUND = (
    "ResourceNotFoundException",
    "ParameterNotFound",
    "QueueDoesNotExist",
    "NonExistentQueue",
)
ABSENT = readback.absent_when([400], {"$.__type": {"regex": "(" + "|".join(NOT_FOUND) + ")$"}})
JSON_10 = "application/x-amz-json-1.0"


def action(facts: Facts) -> str:
    """The action the request calls (`PutItem` of `DynamoDB_20120810.PutItem`)."""
    return facts.request_headers.get("x-amz-target", "").rpartition(".")[2]


def prefix(facts: Facts) -> str:
    """The service prefix of the target header (`DynamoDB_20120810`)."""
    return facts.request_headers.get("x-amz-target", "").rpartition(".")[0]


def endpoint(facts: Facts) -> str:
    """The service endpoint: the request's URL without path or query."""
    p = urlsplit(facts.url)
    return urlunsplit((p.scheme, p.netloc, "/", "", ""))


def headers(facts: Facts, act: str) -> dict[str, str]:
    """The headers of another action of the same service (the agent's Content-Type)."""
    return {
        "X-Amz-Target": f"{prefix(facts)}.{act}",
        "Content-Type": facts.request_headers.get("content-type") or JSON_10,
    }


def body(facts: Facts) -> dict[str, Any]:
    """The request's JSON body; Irreversible when it is not a JSON object."""
    doc = facts.request_json
    if not isinstance(doc, dict):
        raise Irreversible(f"the {action(facts) or 'AWS'} request's body is not a JSON object")
    return doc


def pre_read(facts: Facts, name: str, act: str, payload: dict[str, Any]) -> PreRead:
    """A read of the same service before the step (its "not found" taken for absence)."""
    return PreRead(
        name,
        "POST",
        endpoint(facts),
        headers(facts, act),
        json.dumps(payload).encode(),
        absent_when=ABSENT,
    )


def read_back(facts: Facts, act: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A read-back by the same service's `act` (add `expect`, `gone`, `left`)."""
    return readback.rpc_read("POST", endpoint(facts), payload, headers(facts, act), ABSENT)


def call(facts: Facts, act: str, payload: dict[str, Any]) -> dict[str, Any]:
    """An undo request: `act` of the same service with `payload`."""
    hdrs = headers(facts, act)
    content_type = hdrs.pop("Content-Type")
    out = request("POST", endpoint(facts), json.dumps(payload).encode(), content_type, hdrs)
    return out


def answer(facts: Facts, name: str) -> Any:
    """The JSON a read before the step answered (None: not found); Irreversible when it was
    not made."""
    snap: Snapshot | None = facts.reads.get(name)
    if snap is None:
        raise Irreversible(f"the read {name!r} before the step was not made")
    if not snap.existed:
        return None
    doc = parse_json(snap.body)
    if not isinstance(doc, dict):
        raise Irreversible(f"the read {name!r} before the step did not answer JSON")
    return doc
