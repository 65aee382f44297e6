"""The store's sealing of replayable bodies: every body_b64, at any depth, and nothing else;
sealed in the database on both stores."""

from __future__ import annotations

import base64

import pytest
from cryptography.fernet import Fernet

from tests.store.backends import StoreUnderTest
from tests.store.helpers import a_step
from undoproxy.compensators.record import CompensationRecord
from undoproxy.credentials import CredentialBox
from undoproxy.store import bodies
from undoproxy.store.records import Session


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


COMPENSATION = {
    "kind": "recreate",
    "ready": True,
    "method": "PUT",
    "url": "https://api.example.test/contacts/7",
    "body_b64": b64(b'{"name": "Ada", "phone": "+44 20 7946 0000"}'),
    "fallback": {"method": "POST", "url": "https://api.example.test/c", "body_b64": b64(b"x")},
    "then": [{"method": "PUT", "url": "https://api.example.test/a", "body_b64": None}],
}


def test_every_body_is_sealed_and_opens_back_exactly() -> None:
    box = CredentialBox(Fernet.generate_key())
    sealed = bodies.seal(COMPENSATION, box.encrypt)
    text = repr(sealed)
    assert "Ada" not in text and COMPENSATION["body_b64"] not in text
    assert "body_b64" not in sealed and "body_b64" not in sealed["fallback"]
    assert sealed["then"][0]["body_b64"] is None  # nothing to seal stays as it was
    assert sealed["url"] == COMPENSATION["url"]  # only bodies are sealed
    assert bodies.open_bodies(sealed, box.decrypt) == COMPENSATION


def test_a_body_another_key_sealed_is_marked_and_its_request_is_not_sent() -> None:
    sealed = bodies.seal(COMPENSATION, CredentialBox(Fernet.generate_key()).encrypt)
    opened = bodies.open_bodies(sealed, CredentialBox(Fernet.generate_key()).decrypt)
    assert bodies.unreadable(opened)
    assert "body_b64" not in opened
    record = CompensationRecord.of(opened)
    assert record.request is None
    assert record.reason is not None and "another credentials key" in record.reason


def test_no_inverse_request_with_an_unreadable_body_can_be_sent() -> None:
    """Also a fallback, a `then` request or an email correction: never sent without its body."""
    from undoproxy.compensators.record import InverseRequest
    from undoproxy.rollback.outgoing import NotSendable, compensation_request

    sealed = bodies.seal(COMPENSATION, CredentialBox(Fernet.generate_key()).encrypt)
    opened = bodies.open_bodies(sealed, CredentialBox(Fernet.generate_key()).decrypt)
    for part in (opened, opened["fallback"]):
        with pytest.raises(NotSendable, match="another credentials key"):
            compensation_request(InverseRequest.of(part), part["url"], {}, force=False)


async def test_a_steps_bodies_are_sealed_in_the_database_and_read_back_whole(
    store: StoreUnderTest,
) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        snapshot = {"status": 200, "body_b64": b64(b'{"name": "Ada", "secret": "s3cr3t"}')}
        step = a_step(journal, "s1", snapshot=snapshot, compensation=COMPENSATION)
        await journal.write_ahead(step)
        [(at_rest_snapshot, at_rest_compensation)] = await store.rows(
            f"SELECT snapshot, compensation FROM steps WHERE id='{step.id}'"
        )
        assert "body_sealed" in at_rest_snapshot and "body_sealed" in at_rest_compensation
        assert snapshot["body_b64"] not in at_rest_snapshot
        for plain in (COMPENSATION["body_b64"], COMPENSATION["fallback"]["body_b64"]):
            assert plain not in at_rest_compensation
        read = await journal.step(step.id)
        assert read is not None
        assert (read.snapshot, read.compensation) == (snapshot, COMPENSATION)
    finally:
        await journal.close()
