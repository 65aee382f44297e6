"""The store's sealing of replayable bodies: every body_b64, at any depth, and nothing else."""

from __future__ import annotations

import base64

import pytest
from cryptography.fernet import Fernet

from undoproxy.compensators.record import CompensationRecord
from undoproxy.credentials import CredentialBox
from undoproxy.store import bodies


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
