"""`doctor`'s check that an agent's environment holds placeholders, never a real secret.

An agent that holds a real key can use it around undoproxy (from a host undoproxy does not
see) and can leak it; `secrets:` exists so that it holds only placeholders. The CLI never sees
a real value either: it sends the running undoproxy an HMAC-SHA256 of each variable's value
under a fresh random salt (`POST /api/secrets/check`), and undoproxy answers which variables
hold the value of which entry.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from undoproxy.broker.values import MIN_SECRET
from undoproxy.doctor import Finding

Check = Callable[[dict[str, Any]], dict[str, Any]]


def real_secrets_in(env: Mapping[str, str], check: Check) -> list[Finding]:
    """One `SECRET` finding per variable of `env` that holds a real value of `secrets:`."""
    salt = secrets.token_bytes(16)
    digests = {
        name: hmac.new(salt, value.encode(), hashlib.sha256).hexdigest()
        for name, value in env.items()
        if len(value) >= MIN_SECRET  # shorter values are never a secret's
    }
    if not digests:
        return []
    found = check({"salt": salt.hex(), "digests": digests}).get("found") or []
    return [
        Finding(
            f"${f['variable']}",
            "SECRET",
            f"holds the real value of secret {f['secret']}: the agent could use it around "
            "undoproxy, or leak it",
            "remove it from the agent's environment; `undoproxy env` gives it a placeholder",
        )
        for f in found
    ]
