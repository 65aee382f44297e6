"""The typed view of a compensation record reads every shape `prepare`/`complete` store."""

from __future__ import annotations

from undoproxy.compensators.build import prepare
from undoproxy.compensators.model import Plan
from undoproxy.compensators.record import CompensationRecord, InverseRequest

from .helpers import API, facts, run, snapshot, step

ITEM = f"{API}/items/7"


def test_a_recreate_reads_as_a_put_with_its_post_fallback_and_its_baseline() -> None:
    snap = snapshot(ITEM, body={"id": 7}, content_type="application/json")
    raw = prepare(Plan("recreate", snapshot_url=ITEM), facts("DELETE", ITEM, snap=snap))
    rec = CompensationRecord.of(raw)
    assert rec.request is not None and (rec.request.method, rec.request.url) == ("PUT", ITEM)
    assert rec.fallback is not None and (rec.fallback.method, rec.fallback.url) == (
        "POST",
        f"{API}/items",
    )
    assert (rec.kind, rec.check_absent, rec.snapshot_url, rec.raw) == ("recreate", True, ITEM, raw)


def test_an_inferred_creation_reads_as_inferred() -> None:
    p, f = step(None, "POST", f"{API}/items", {"name": "x"})
    rec = CompensationRecord.of(run(p, f, 201, {"id": 9}))
    assert rec.inferred and rec.kind == "delete-created"
    assert rec.request == InverseRequest("DELETE", f"{API}/items/9")


def test_irreversible_noop_and_nothing_recorded_have_no_request() -> None:
    irreversible = CompensationRecord.of({"kind": "irreversible", "ready": False, "reason": "r"})
    assert (irreversible.request, irreversible.reason) == (None, "r")
    noop = CompensationRecord.of({"kind": "recreate", "ready": False, "noop": "n"})
    assert (noop.request, noop.noop) == (None, "n")
    assert CompensationRecord.of(None) == CompensationRecord(raw={})


def test_a_rules_forwarding_and_slacks_ok_check_are_kept() -> None:
    rec = InverseRequest.of(
        {"method": "POST", "url": "https://x.test/a", "expect_ok": True, "credentials": "forward"}
    )
    assert rec.expect_ok and rec.forward_credentials
