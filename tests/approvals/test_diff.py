"""The diff shown for a held update: pure, redacted, merge-patch aware."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.approvals.diff import merge_patch, update_diff

CURRENT = {
    "url": "https://api.test/c/1?token=abc",
    "status": 200,
    "body": {"name": "Ada", "tier": "gold"},
}


def changes(diff: dict[str, Any] | None) -> list[list[str]]:
    assert diff is not None
    return [line for line in diff["lines"] if line[0] in "+-"]


def test_put_replaces_the_whole_target() -> None:
    diff = update_diff("PUT", CURRENT, {"name": "Ada L."})
    assert changes(diff) == [
        ["-", '  "name": "Ada",'],
        ["-", '  "tier": "gold"'],
        ["+", '  "name": "Ada L."'],
    ]
    assert diff is not None and diff["url"] == "https://api.test/c/1?token=%5Bredacted%5D"


def test_patch_is_a_merge_patch() -> None:
    diff = update_diff("PATCH", CURRENT, {"tier": None, "title": "Countess"})
    assert changes(diff) == [["-", '  "tier": "gold"'], ["+", '  "title": "Countess"']]
    assert diff is not None and [" ", '  "name": "Ada",'] in diff["lines"]
    assert diff is not None and diff["merge_patch"] is True


def test_secrets_are_redacted_on_both_sides() -> None:
    current = {**CURRENT, "body": {"password": "old-SECRET"}}
    diff = update_diff("PUT", current, {"password": "new-SECRET"})
    assert diff is not None and "SECRET" not in repr(diff) and diff["lines"] == []


@pytest.mark.parametrize(
    ("method", "current"), [("POST", CURRENT), ("PUT", None), ("DELETE", None)]
)
def test_no_diff_when_not_an_update_or_the_target_is_unknown(
    method: str, current: dict[str, Any] | None
) -> None:
    assert update_diff(method, current, {"a": 1}) is None


def test_a_held_delete_shows_what_it_would_delete() -> None:
    diff = update_diff("DELETE", CURRENT, None)
    assert diff is not None and diff["deletes"] is True
    assert changes(diff) == [
        ["-", "{"],
        ["-", '  "name": "Ada",'],
        ["-", '  "tier": "gold"'],
        ["-", "}"],
    ]


def test_a_held_delete_of_nothing_removes_nothing() -> None:
    diff = update_diff("DELETE", {"url": "u", "status": 404, "body": {"error": "nope"}}, None)
    assert diff is not None and diff["lines"] == []


def test_a_missing_target_shows_everything_as_added() -> None:
    diff = update_diff("PUT", {"url": "u", "status": 404, "body": {"error": "nope"}}, {"a": 1})
    assert changes(diff) == [["+", "{"], ["+", '  "a": 1'], ["+", "}"]]


def test_merge_patch_follows_rfc_7396() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    assert merge_patch({"a": 1}, ["x"]) == ["x"]
    assert merge_patch("text", {"a": 1}) == {"a": 1}
