"""GitHub REST compensators: the inverse of each write the `github` pack recognises.

Each takes the step's Facts (after a 2xx response) and returns the inverse request with its
`readback` (what a GET must show for the undo to count, see `readback.py`), or raises
Irreversible / NothingToUndo. URLs keep the request's own prefix, so GitHub Enterprise
(`https://HOST/api/v3/...`) works unchanged.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, origin, parse_json
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.readback import expect, gone, left_by, readback
from undoproxy.compensators.responses import at_path, base_before, need, prior, repo_path, sent

UNDO_MESSAGE = "undoproxy: roll back an agent's change"


def _without_query(url: str) -> str:
    return url.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def close_issue(facts: Facts) -> dict[str, Any]:
    """Issues cannot be deleted: PATCH the created issue to closed, not planned."""
    number = need(facts, "number")
    url = f"{_without_query(facts.url)}/{number}"
    out = request("PATCH", url, {"state": "closed", "state_reason": "not_planned"})
    out["readback"] = readback(url, expect(["state"], "closed"))
    return out


def close_pull(facts: Facts) -> dict[str, Any]:
    """PATCH the created pull request to closed."""
    number = need(facts, "number")
    url = f"{_without_query(facts.url)}/{number}"
    out = request("PATCH", url, {"state": "closed"})
    out["readback"] = readback(url, expect(["state"], "closed"))
    return out


def delete_comment(facts: Facts) -> dict[str, Any]:
    """DELETE the created comment (its API `url` on the same origin, else by its id)."""
    body = facts.response_json
    url = body.get("url") if isinstance(body, dict) else None
    # Only the request's own scheme, host and port: never send the credentials elsewhere.
    if isinstance(url, str) and origin(url) == origin(facts.url):
        return request("DELETE", url)
    comment_id = need(facts, "id")
    return request(
        "DELETE", at_path(facts.url, f"{repo_path(facts.url)}/issues/comments/{comment_id}")
    )


# How a field the agent PATCHed reads in the resource (the snapshot), and how it is sent back.
def _names(value: Any, key: str) -> list[Any]:
    return [item.get(key) if isinstance(item, dict) else item for item in value or []]


def _one(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else value


FIELD_VIEWS: dict[str, tuple[list[str | int], Any]] = {
    "labels": (["labels", "*", "name"], lambda v: _names(v, "name")),
    "assignees": (["assignees", "*", "login"], lambda v: _names(v, "login")),
    "assignee": (["assignee", "login"], lambda v: _one(v, "login")),
    "milestone": (["milestone", "number"], lambda v: _one(v, "number")),
}


def restore_fields(facts: Facts) -> dict[str, Any]:
    """PATCH back the prior value of exactly the fields the agent sent (issue, comment, pull)."""
    before = prior(facts)
    assert facts.snapshot is not None
    fields = sent(facts)
    if not isinstance(before, dict):
        raise Irreversible("the snapshot is not one resource, so its fields cannot be put back")
    if not fields:
        raise NothingToUndo("the PATCH sent no fields, so it changed nothing", "request")
    body, checks = {}, []
    names = list(fields)
    if "state" in names and "state_reason" in before and "state_reason" not in names:
        names.append("state_reason")  # GitHub sets it with every change of state
    for name in names:
        path, view = FIELD_VIEWS.get(name, ([name], lambda v: v))
        body[name] = view(before.get(name))
        checks.append(expect(path, body[name]))
    out = request("PATCH", facts.snapshot.url, body)
    out["readback"] = readback(facts.snapshot.url, *checks)
    out["readback"]["left"] = left_by(facts.response_json, checks)
    return out


def delete_label(facts: Facts) -> dict[str, Any]:
    """DELETE the created repository label by its name."""
    name = need(facts, "name")
    url = at_path(facts.url, f"{repo_path(facts.url)}/labels/{quote(str(name), safe='')}")
    return request("DELETE", url)


def _requested_labels(facts: Facts) -> list[str]:
    body = facts.request_json
    labels = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(labels, list):
        raise Irreversible("the request names no labels, so what it added is unknown")
    return [str(x.get("name") if isinstance(x, dict) else x) for x in labels]


LABELS_PAGE = 100  # the snapshot reads `?per_page=100`, GitHub's largest page


def remove_added_labels(facts: Facts) -> dict[str, Any]:
    """DELETE each label the agent added that was not on the issue before (snapshot)."""
    before = prior(facts)
    assert facts.snapshot is not None
    if not isinstance(before, list):
        raise Irreversible("the issue's labels before the request could not be read")
    if len(before) >= LABELS_PAGE:
        # A label on a later page, there all along, would be deleted as "added".
        raise Irreversible(
            f"the issue had {LABELS_PAGE} labels or more, more than one page shows, so which "
            "labels the agent added is unknown"
        )
    had = [str(label.get("name")) for label in before if isinstance(label, dict)]
    added = [name for name in dict.fromkeys(_requested_labels(facts)) if name not in had]
    if not added:
        raise NothingToUndo("every label the agent added was on the issue before", "read")
    base = _without_query(facts.url)
    deletes = [request("DELETE", f"{base}/{quote(name, safe='')}") for name in added]
    out = {**deletes[0], "then": deletes[1:]}
    out["readback"] = readback(facts.snapshot.url, expect(["*", "name"], had))
    out["readback"]["pages"] = {"link": True}  # GitHub pages with Link: rel="next"
    return out


def _branch(facts: Facts) -> dict[str, str]:
    """The request's `branch`, checked against the branch the snapshot read."""
    body = facts.request_json
    branch = body.get("branch") if isinstance(body, dict) else None
    if not branch:
        return {}
    url = facts.snapshot.url if facts.snapshot else facts.url
    read = parse_qs(urlsplit(url).query).get("ref", [None])[0]
    if read != branch:
        raise Irreversible(
            f"the write went to branch {branch!r} but the snapshot read the default branch; "
            "undo it by hand (or give the rule a snapshot url with ?ref=)"
        )
    return {"branch": str(branch)}


def contents(facts: Facts) -> dict[str, Any]:
    """A file written (PUT) or deleted (DELETE) through the contents API, put back.

    Created: DELETE it with the new blob `sha`. Updated: PUT the prior content with the new
    blob `sha`. Deleted: PUT the prior content back. Read back by blob `sha` (content-addressed:
    the same bytes give the same sha).
    """
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the prior content is unknown")
    url = _without_query(facts.url)
    branch = _branch(facts)
    if not snap.existed:
        if facts.method == "DELETE":
            raise NothingToUndo("the file did not exist before the DELETE", "read")
        new_sha = need(facts, "sha", need(facts, "content"))
        out = request("DELETE", url, {"message": UNDO_MESSAGE, "sha": new_sha, **branch})
        out["readback"] = gone(snap.url)
        return out
    before = parse_json(snap.body)
    if not isinstance(before, dict) or before.get("type") != "file":
        raise Irreversible("the snapshot is not a file (a directory?), so it cannot be put back")
    content = "".join(str(before.get("content") or "").split())
    if before.get("encoding") not in (None, "base64"):
        raise Irreversible(f"the snapshot's content is {before.get('encoding')}, not base64")
    base64.b64decode(content, validate=True)  # a truncated read is never written back
    body: dict[str, Any] = {"message": UNDO_MESSAGE, "content": content, **branch}
    if facts.method == "PUT":
        body["sha"] = need(facts, "sha", need(facts, "content"))
    out = request("PUT", url, body)
    out["readback"] = readback(snap.url, expect(["sha"], before.get("sha")))
    return out


def delete_ref(facts: Facts) -> dict[str, Any]:
    """DELETE the created git reference (`refs/heads/x` is deleted as `git/refs/heads/x`)."""
    body = facts.response_json
    ref = body.get("ref") if isinstance(body, dict) else None
    if not ref:
        asked = facts.request_json
        ref = asked.get("ref") if isinstance(asked, dict) else None
    if not isinstance(ref, str) or not ref.startswith("refs/") or ".." in ref:
        raise Irreversible("the response names no ref under refs/, so the ref is unknown")
    name = "/".join(quote(part, safe="") for part in ref.removeprefix("refs/").split("/"))
    repo = repo_path(facts.url)
    out = request("DELETE", at_path(facts.url, f"{repo}/git/refs/{name}"))
    out["readback"] = gone(at_path(facts.url, f"{repo}/git/ref/{name}"))
    return out


def delete_repo(facts: Facts) -> dict[str, Any]:
    """DELETE the created repository (`full_name` from the response)."""
    full_name = str(need(facts, "full_name"))
    owner, _, name = full_name.partition("/")
    if not owner or not name or "/" in name or ".." in full_name:
        raise Irreversible(f"the response's full_name {full_name!r} is not owner/name")
    marker = "/orgs/" if "/orgs/" in urlsplit(facts.url).path else "/user/"
    prefix = base_before(facts.url, marker)
    url = at_path(facts.url, f"{prefix}/repos/{quote(owner, safe='')}/{quote(name, safe='')}")
    return request("DELETE", url)


BUILDERS = {
    "github.close-issue": close_issue,
    "github.close-pull": close_pull,
    "github.delete-comment": delete_comment,
    "github.restore-fields": restore_fields,
    "github.delete-label": delete_label,
    "github.remove-added-labels": remove_added_labels,
    "github.contents": contents,
    "github.delete-ref": delete_ref,
    "github.delete-repo": delete_repo,
}

DESCRIPTIONS = {
    "github.close-issue": "PATCH the created issue closed, not planned (issues stay)",
    "github.close-pull": "PATCH the created pull request to closed",
    "github.delete-comment": "DELETE the created issue comment",
    "github.restore-fields": "PATCH back the prior values (snapshot) of exactly the fields sent",
    "github.delete-label": "DELETE the created repository label",
    "github.remove-added-labels": "DELETE each label added that was not on the issue before",
    "github.contents": "DELETE a created file, PUT back an updated or deleted one (blob sha)",
    "github.delete-ref": "DELETE the created git reference",
    "github.delete-repo": "DELETE the created repository",
}
