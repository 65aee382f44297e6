"""What the rollback tests share: the store's credentials and reading a rollback's report
(the rollback itself: `Undoproxy.rollback`)."""

from __future__ import annotations

from typing import Any

from tests.support.proc import Undoproxy

TOKEN = "sk-store-SECRET-42"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def statuses(report: dict[str, Any]) -> list[str]:
    """The report's step statuses, newest step first."""
    return [s["status"] for s in report["steps"]]


def details(report: dict[str, Any]) -> list[str]:
    """The report's step details, newest step first."""
    return [s["detail"] for s in report["steps"]]


def rollback_ends(
    proxy: Undoproxy, session: str, state: str, step_statuses: list[str], **body: Any
) -> dict[str, Any]:
    """POST the rollback, assert the state it ends in and each step's status (newest first),
    and return its report."""
    report = proxy.rollback(session, **body)
    assert (report["state"], statuses(report)) == (state, step_statuses), report
    return report
