"""The diff a person sees for a held update: the target as it is now, and as the agent wants it.
For a held DELETE, the target as it is now, every line of it going: what would be deleted.

PUT replaces the target with its body. PATCH with a JSON object body is applied as a JSON Merge
Patch (RFC 7396: `null` deletes a field), the usual meaning of a JSON PATCH body; anything else
is shown as sent. Both sides are redacted before they are compared, so no secret is shown.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from undoproxy import redact

UPDATE_METHODS = frozenset({"PUT", "PATCH"})
PREVIEW_METHODS = UPDATE_METHODS | {"DELETE"}  # held requests shown with the target as it is
MAX_LINES = 400


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: `patch` applied to `target`."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(redact.json_value(value), indent=2, sort_keys=True, ensure_ascii=False)


def update_diff(method: str, current: dict[str, Any] | None, wanted: Any) -> dict[str, Any] | None:
    """The diff of an update, or None when it is not an update or the target is unknown.

    `current` is `{"url", "status", "body"}` (the body parsed JSON or text) as read just now;
    `wanted` is the request's parsed JSON body (or its text).
    """
    if method.upper() not in PREVIEW_METHODS or current is None:
        return None
    before_value = current.get("body")
    if current.get("status") in (404, 410):
        before_value = None
    deletes = method.upper() == "DELETE"
    after_value = (
        None
        if deletes
        else merge_patch(before_value, wanted)
        if method.upper() == "PATCH" and isinstance(wanted, dict)
        else wanted
    )
    before = "" if before_value is None else _text(before_value)
    after = "" if after_value is None else _text(after_value)
    lines: list[list[str]] = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), "current", "wanted", n=3, lineterm=""
    ):
        if line.startswith(("---", "+++")):
            continue
        op = line[:1] if line[:1] in ("+", "-", "@") else " "
        lines.append([op, line[1:] if op != "@" else line])
    truncated = len(lines) > MAX_LINES
    return {
        "url": redact.url(str(current.get("url") or "")),
        "status": current.get("status"),
        "merge_patch": method.upper() == "PATCH" and isinstance(wanted, dict),
        "deletes": deletes,  # the lines are what a DELETE would remove
        "changed": sum(1 for op, _ in lines if op in "+-"),
        "lines": lines[:MAX_LINES],
        "truncated": truncated,
    }
