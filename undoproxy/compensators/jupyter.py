"""Jupyter Server's rename (`PATCH /api/contents/{path}` `{"path": new}`), undone by
renaming back (pure). The pack's other rules are written out as read-then-undo (packs/
jupyter.yaml); a rename's undo goes to the *new* path, which no template can build under a
server's base URL (JupyterHub serves `/user/NAME/api/contents/...`): it is the request's own
URL with the old path replaced by the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import Facts, Irreversible, PreRead, parse_json
from undoproxy.compensators.model import inverse_request as request

CONTENTS = "/api/contents/"
COMPARED: list[list[str | int]] = [["path"], ["type"], ["format"], ["content"]]


def _moved_to(facts: Facts) -> str:
    """The URL of the path the rename moved the file to."""
    body = facts.request_json
    new = body.get("path") if isinstance(body, dict) else None
    if not isinstance(new, str) or not new.strip("/"):
        raise Irreversible("the rename names no new path")
    p = urlsplit(facts.url)
    head, found, _ = p.path.rpartition(CONTENTS)
    if not found:
        raise Irreversible("not a Jupyter contents URL")
    path = head + CONTENTS + quote(new.strip("/"), safe="/")
    return urlunsplit((p.scheme, p.netloc, path, "", ""))


def reads(facts: Facts) -> list[PreRead]:
    """The file or directory as it is, content included."""
    _moved_to(facts)
    return [PreRead("before", "GET", facts.url)]


def undo_rename(facts: Facts) -> dict[str, Any]:
    """PATCH the new path back to the old one; read the old path back."""
    snap = facts.reads.get("before")
    doc = parse_json(snap.body) if snap is not None and snap.existed else None
    if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
        raise Irreversible("what was renamed could not be read before the rename")
    out = request("PATCH", _moved_to(facts), {"path": doc["path"]})
    check = readback.rpc_read("GET", facts.url, b"")
    check.pop("body_b64")
    check["expect"] = [readback.same_digest(p, readback.value_at(doc, p)) for p in COMPARED]
    check["left_paths"] = COMPARED
    out["readback"] = check
    out["target"] = readback.target_name(check)
    out["needs_after_read"] = True
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {"jupyter.rename": reads}
BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {"jupyter.rename": undo_rename}
DESCRIPTIONS = {
    "jupyter.rename": "PATCH the new path back to the old one (under any base URL); read back "
    "the old path's type, format and content",
}
