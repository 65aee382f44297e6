"""What the rollback tests share: the store's credentials, the rollback call and its report."""

from __future__ import annotations

from typing import Any

from tests.support.proc import Undoproxy

TOKEN = "sk-store-SECRET-42"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def rollback(proxy: Undoproxy, session: str, **body: Any) -> dict[str, Any]:
    """POST the rollback and return its report (it must answer 200)."""
    r = proxy.api("POST", f"/api/sessions/{session}/rollback", json=body)
    assert r.status_code == 200, r.text
    return r.json()


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
    report = rollback(proxy, session, **body)
    assert (report["state"], statuses(report)) == (state, step_statuses), report
    return report
