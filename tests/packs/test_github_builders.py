"""The github pack's compensators as pure functions: the inverse request and its read-back,
built from the step's request, response and snapshot (no network)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.compensators.helpers import run, sent_json, snapshot, step
from undoproxy.compensators.readback import differences

API = "https://api.github.com"
GHE = "https://ghe.example.test/api/v3"
REPO = "/repos/acme/web"


def _rule(name: str, *, snap: bool = False, method: str = "POST") -> str:
    return f"match: {{method: {method}}}\ncompensate: {name}" + ("\nsnapshot: true" if snap else "")


def _build(
    name: str,
    method: str,
    url: str,
    body: Any,
    response: Any,
    *,
    snap: Any = None,
    snap_status: int = 200,
    status: int = 200,
) -> dict[str, Any]:
    taken = None if snap is None and snap_status == 200 else snapshot(url, snap_status, snap or b"")
    p, f = step(_rule(name, snap=taken is not None, method=method), method, url, body, snap=taken)
    return run(p, f, status, response)


ISSUE = {
    "number": 7,
    "title": "old title",
    "body": "old body",
    "state": "open",
    "state_reason": None,
    "labels": [{"name": "bug"}, {"name": "p1"}],
    "assignees": [{"login": "ada"}],
    "assignee": {"login": "ada"},
    "milestone": {"number": 3, "title": "v1"},
    "updated_at": "2026-01-01T00:00:00Z",
}


def test_an_issue_patch_is_undone_field_by_field_as_github_reads_them() -> None:
    url = f"{API}{REPO}/issues/7"
    sent = {
        "title": "new",
        "labels": ["wontfix"],
        "assignees": [],
        "milestone": None,
        "state": "closed",
    }
    comp = _build("github.restore-fields", "PATCH", url, sent, {**ISSUE, **sent}, snap=ISSUE)
    assert sent_json(comp) == {
        "method": "PATCH",
        "url": url,
        "body": {
            "title": "old title",
            "labels": ["bug", "p1"],
            "assignees": ["ada"],
            "milestone": 3,
            "state": "open",
            "state_reason": None,  # GitHub sets it with every change of state
        },
        "content_type": "application/json",
    }
    readback = comp["readback"]
    assert readback["url"] == url
    assert differences(readback["expect"], ISSUE) == []
    changed = {**ISSUE, "title": "new", "labels": [{"name": "p1"}]}
    assert differences(readback["expect"], changed) == [
        "title is not as before",
        "labels.*.name is not as before",
    ]


def test_a_patch_without_a_snapshot_of_the_target_is_irreversible() -> None:
    url = f"{API}{REPO}/issues/comments/9"
    comp = _build("github.restore-fields", "PATCH", url, {"body": "x"}, {"id": 9}, snap_status=404)
    assert "did not exist before" in comp["reason"]


def test_labels_added_are_removed_one_by_one_and_only_the_new_ones() -> None:
    url = f"{GHE}{REPO}/issues/7/labels"
    before = [{"name": "bug"}]
    comp = _build(
        "github.remove-added-labels",
        "POST",
        url,
        ["bug", "needs triage", "x/y"],
        [*before, {"name": "needs triage"}, {"name": "x/y"}],
        snap=before,
    )
    deletes = [(comp["method"], comp["url"])] + [(r["method"], r["url"]) for r in comp["then"]]
    assert deletes == [("DELETE", f"{url}/needs%20triage"), ("DELETE", f"{url}/x%2Fy")]
    assert differences(comp["readback"]["expect"], before) == []
    assert differences(comp["readback"]["expect"], [*before, {"name": "x/y"}]) != []


def test_labels_that_were_all_there_before_leave_nothing_to_undo() -> None:
    url = f"{API}{REPO}/issues/7/labels"
    comp = _build(
        "github.remove-added-labels", "POST", url, {"labels": ["bug"]}, [], snap=[{"name": "bug"}]
    )
    assert comp["noop"] == "every label the agent added was on the issue before"


def _file(content: bytes, sha: str = "oldsha") -> dict[str, Any]:
    encoded = base64.encodebytes(content).decode()
    return {"type": "file", "sha": sha, "encoding": "base64", "content": encoded}


NEW = {"content": {"sha": "newsha", "path": "a.md"}, "commit": {"sha": "c"}}
CONTENTS = f"{API}{REPO}/contents/docs/a.md"


def test_a_created_file_is_deleted_with_its_new_blob_sha() -> None:
    comp = _build(
        "github.contents",
        "PUT",
        CONTENTS,
        {"message": "m", "content": "eA=="},
        NEW,
        snap_status=404,
    )
    assert (comp["method"], comp["url"]) == ("DELETE", CONTENTS)
    assert sent_json(comp)["body"]["sha"] == "newsha"
    assert comp["readback"] == {"url": CONTENTS, "gone": True}


def test_an_updated_file_gets_its_prior_content_with_the_new_sha() -> None:
    comp = _build(
        "github.contents",
        "PUT",
        CONTENTS,
        {"message": "m", "content": "eA==", "sha": "oldsha"},
        NEW,
        snap=_file(b"x" * 100),
    )
    body = sent_json(comp)["body"]
    assert (comp["method"], body["sha"]) == ("PUT", "newsha")
    assert base64.b64decode(body["content"]) == b"x" * 100 and "\n" not in body["content"]
    assert comp["readback"]["expect"] == [{"path": ["sha"], "equals": "oldsha"}]


def test_a_deleted_file_is_put_back_without_a_sha() -> None:
    comp = _build(
        "github.contents",
        "DELETE",
        CONTENTS,
        {"message": "m", "sha": "oldsha"},
        {"content": None},
        snap=_file(b"hello"),
    )
    body = sent_json(comp)["body"]
    assert comp["method"] == "PUT" and "sha" not in body
    assert base64.b64decode(body["content"]) == b"hello"


@pytest.mark.parametrize(
    ("snap", "body", "reason"),
    [
        ([_file(b"a")], {"message": "m"}, "is not a file"),
        (_file(b"a"), {"message": "m", "branch": "feature"}, "went to branch 'feature'"),
    ],
)
def test_contents_the_snapshot_cannot_restore_are_irreversible(
    snap: Any, body: dict[str, Any], reason: str
) -> None:
    comp = _build("github.contents", "PUT", CONTENTS, body, NEW, snap=snap)
    assert reason in comp["reason"]


def test_a_created_ref_is_deleted_and_read_back_by_its_exact_name() -> None:
    comp = _build(
        "github.delete-ref",
        "POST",
        f"{GHE}{REPO}/git/refs",
        {"ref": "refs/heads/agent/work", "sha": "a"},
        {"ref": "refs/heads/agent/work"},
    )
    assert (comp["method"], comp["url"]) == ("DELETE", f"{GHE}{REPO}/git/refs/heads/agent/work")
    assert comp["readback"] == {"url": f"{GHE}{REPO}/git/ref/heads/agent/work", "gone": True}


@pytest.mark.parametrize(
    ("url", "deleted"),
    [
        (f"{API}/user/repos", f"{API}/repos/octo/made"),
        (f"{API}/orgs/acme/repos", f"{API}/repos/octo/made"),
        (f"{GHE}/user/repos", f"{GHE}/repos/octo/made"),
    ],
)
def test_a_created_repository_is_deleted_by_its_full_name(url: str, deleted: str) -> None:
    comp = _build("github.delete-repo", "POST", url, {"name": "made"}, {"full_name": "octo/made"})
    assert (comp["method"], comp["url"]) == ("DELETE", deleted)


@pytest.mark.parametrize(
    ("name", "url", "response", "reason"),
    [
        ("github.close-pull", f"{API}{REPO}/pulls", {"id": 1}, "has no 'number'"),
        ("github.delete-label", f"{API}{REPO}/labels", {}, "has no 'name'"),
        ("github.delete-repo", f"{API}/user/repos", {"full_name": "x"}, "is not owner/name"),
        ("github.delete-ref", f"{API}{REPO}/git/refs", {"ref": "heads/x"}, "no ref under refs/"),
    ],
)
def test_an_answer_without_what_the_undo_needs_is_irreversible(
    name: str, url: str, response: Any, reason: str
) -> None:
    comp = _build(name, "POST", url, {}, response)
    assert reason in comp["reason"] and "method" not in comp


def test_closing_reads_back_the_state() -> None:
    comp = _build(
        "github.close-issue", "POST", f"{API}{REPO}/issues", {"title": "t"}, {"number": 4}
    )
    assert comp["readback"] == {
        "url": f"{API}{REPO}/issues/4",
        "expect": [{"path": ["state"], "equals": "closed"}],
    }
