"""Matrix client-server API compensators: `/_matrix/client/{v3,r0}/rooms/{room}/...` (pure).

- `send`: `PUT .../rooms/{room}/send/{type}/{txnId}` answers `{"event_id"}`; it is undone by
  redacting that event, `PUT .../rooms/{room}/redact/{event_id}/{txnId'}`. A homeserver
  answers a repeated transaction id of the same user with the first answer and redacts
  nothing again, so txnId' is derived from the event (the same on every retry). Read back:
  `GET .../rooms/{room}/event/{event_id}` must show it redacted (`content` empty, and
  `unsigned.redacted_because` a redaction); before that, a target whose content is neither
  as the agent sent it nor empty was changed by someone else.
- `state`: `PUT .../rooms/{room}/state/{type}[/{stateKey}]` is undone by putting back the
  content the same URL answered just before (the snapshot). Matrix cannot remove a state
  event: when the room had none of that type and key, the step is irreversible.
Segments are kept as the agent's URL encoded them (room ids `!a:b`, event ids `$x`).
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators.model import Facts, Irreversible
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.readback import expect, readback
from undoproxy.compensators.responses import need, prior

REASON = "rolled back by undoproxy"


def _room_path(facts: Facts, verb: str) -> tuple[str, list[str]]:
    """(`.../rooms/{room}` as sent, the segments after `verb`); Irreversible otherwise."""
    path = urlsplit(facts.url).path
    segments = path.split("/")
    try:
        at = segments.index("rooms")
    except ValueError:
        at = -1
    if at < 0 or len(segments) < at + 3 or segments[at + 2] != verb or not segments[at + 1]:
        raise Irreversible(
            f"{redact.url(facts.url)} is not a Matrix /rooms/{{room}}/{verb}/ URL, so the "
            "target is unknown"
        )
    return "/".join(segments[: at + 2]), segments[at + 3 :]


def _url(facts: Facts, path: str) -> str:
    p = urlsplit(facts.url)
    return urlunsplit((p.scheme, p.netloc, path, "", ""))


def txn_for(event_id: str) -> str:
    """The redaction's transaction id: derived from the event, so a retry is the same one."""
    return "undoproxy-" + hashlib.sha256(event_id.encode()).hexdigest()[:32]


def redact_event(facts: Facts) -> dict[str, Any]:
    """Redact the event `send` created; read it back redacted."""
    room, _ = _room_path(facts, "send")
    event_id = str(need(facts, "event_id"))
    event = quote(event_id, safe="")
    out = request(
        "PUT", _url(facts, f"{room}/redact/{event}/{txn_for(event_id)}"), {"reason": REASON}
    )
    sent = facts.request_json
    check = readback(
        _url(facts, f"{room}/event/{event}"),
        expect(["content"], {}),
        expect(["unsigned", "redacted_because", "type"], "m.room.redaction"),
    )
    # As the step left it: the content the agent sent (events are never edited in place).
    check["left"] = [expect(["content"], sent if isinstance(sent, dict) else {})]
    out["readback"] = check
    return out


def restore_state(facts: Facts) -> dict[str, Any]:
    """PUT back the state content the same URL answered before the step."""
    _room_path(facts, "state")
    snap = facts.snapshot
    if snap is not None and not snap.existed:
        raise Irreversible(
            "the room had no such state event before this step, and Matrix cannot remove a "
            "state event: set it by hand (an empty content is how most state is cleared)"
        )
    before = prior(facts)
    if not isinstance(before, dict):
        raise Irreversible("the state read before the step is not a JSON object")
    target = _url(facts, urlsplit(facts.url).path)
    out = request("PUT", target, before)
    check = readback(target, expect([], before))
    sent = facts.request_json
    check["left"] = [expect([], sent if isinstance(sent, dict) else {})]
    out["readback"] = check
    return out


BUILDERS = {
    "matrix.redact-event": redact_event,
    "matrix.restore-state": restore_state,
}

DESCRIPTIONS = {
    "matrix.redact-event": "redact the event a send created (a transaction id derived from it)",
    "matrix.restore-state": "PUT back the prior state content (read before)",
}
