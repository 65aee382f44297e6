"""What a compensation replays is kept encrypted at rest: the bodies of snapshots and inverse
requests.

A step's `snapshot` (the target as it was) and `compensation` (the inverse request, its
`fallback`, its `then` requests, a correction) carry bodies as `body_b64`. Those bytes are what
rollback writes back, often a customer's record in full, so the journal never stores them in
clear: each `body_b64` becomes `body_sealed`, the same bytes encrypted with the installation's
credentials key (Fernet: AES-128-CBC with an HMAC-SHA256, the same key that seals the agent's
credentials, `undoproxy/credentials.py`). Reading a step opens them again, so everything above
the store sees `body_b64` as before.

A body that cannot be opened (the database was moved to an installation with another key) is
not guessed at: it stays `body_sealed` and is marked `body_unreadable`, and the compensation
record treats the inverse request as one that cannot be sent (`compensators/record.py`);
rollback reports the step instead of writing an empty body over the target.

The request and response bodies of a step are the audit record the page shows (redacted), and
stay as they are.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

SEALED_COLUMNS = frozenset({"snapshot", "compensation"})
PLAIN, SEALED, UNREADABLE = "body_b64", "body_sealed", "body_unreadable"

Encrypt = Callable[[bytes], bytes]
Decrypt = Callable[[bytes], bytes]  # raises ValueError (or InvalidToken) when it cannot


def seal(value: Any, encrypt: Encrypt) -> Any:
    """`value` with every non-empty `body_b64` replaced by its encrypted form (a new object)."""
    if isinstance(value, dict):
        out = {k: seal(v, encrypt) for k, v in value.items() if k != PLAIN}
        body = value.get(PLAIN)
        if isinstance(body, str) and body:
            try:
                raw = base64.b64decode(body, validate=True)
            except (binascii.Error, ValueError):
                raw = body.encode()  # not base64: sealed as it is, opened as it was
                out[SEALED] = "t:" + encrypt(raw).decode("ascii")
            else:
                out[SEALED] = encrypt(raw).decode("ascii")
        elif PLAIN in value:
            out[PLAIN] = body
        return out
    if isinstance(value, list):
        return [seal(v, encrypt) for v in value]
    return value


def open_bodies(value: Any, decrypt: Decrypt) -> Any:
    """`value` with every `body_sealed` opened back into `body_b64` (a new object).

    One that cannot be opened stays sealed, with `body_unreadable: true` next to it.
    """
    if isinstance(value, dict):
        out = {k: open_bodies(v, decrypt) for k, v in value.items() if k != SEALED}
        token = value.get(SEALED)
        if isinstance(token, str):
            text = token.startswith("t:")
            try:
                raw = decrypt((token[2:] if text else token).encode("ascii"))
            except Exception:  # InvalidToken, a truncated or edited value: all the same here
                out[SEALED], out[UNREADABLE] = token, True
            else:
                out[PLAIN] = raw.decode() if text else base64.b64encode(raw).decode("ascii")
        return out
    if isinstance(value, list):
        return [open_bodies(v, decrypt) for v in value]
    return value


def unreadable(value: Any) -> bool:
    """True when some body in `value` could not be opened."""
    if isinstance(value, dict):
        return bool(value.get(UNREADABLE)) or any(unreadable(v) for v in value.values())
    if isinstance(value, list):
        return any(unreadable(v) for v in value)
    return False
