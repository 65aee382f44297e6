"""The email pack's correction through a real `undoproxy run`: rollback writes to the people.

`packs: [{name: email, correction: {subject, text}}]`: the agent's email (SendGrid's own SDK;
Resend and SES by plain HTTP) is held, approved and sent; rollback reports it `irreversible`
and sends the correction to the same recipients through the same provider, once. The fake
providers (tests/support/protocols.py) keep an outbox of what they accepted for delivery.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import sendgrid
from sendgrid.helpers.mail import Mail

from tests.support import protocols
from tests.support.certs import self_signed, server_context
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

SUBJECT = "Please ignore my last email"
TEXT = "It was sent by mistake by an automated assistant. Sorry for the noise."
KEY = "SG.live-key"


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    ctx = server_context(self_signed(tmp_path_factory.mktemp("email-cert")))
    server = ThreadedServer(protocols.create_app(), ctx).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, fake: ThreadedServer) -> Iterator[Undoproxy]:
    config = {
        "approvals": {"timeout": "60s"},
        "packs": [
            {
                "name": "email",
                "hosts": [f"127.0.0.1:{fake.port}"],
                "correction": {"subject": SUBJECT, "text": TEXT},
            }
        ],
    }
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-email"), config).start()
    yield instance
    instance.stop()


@pytest.fixture
def session() -> str:
    return f"mail-{uuid.uuid4().hex[:10]}"


def _outbox(fake: ThreadedServer) -> list[tuple[str, Any]]:
    return list(fake.app[protocols.OUTBOX])


def _approved(proxy: Undoproxy, session: str, send: Callable[[], Any]) -> Any:
    """Run `send` (the agent) in a thread, approve its held email, return what it got (an SDK
    that raises on an HTTP error gives its exception)."""

    def agent() -> Any:
        try:
            return send()
        except Exception as exc:
            return exc

    answer = in_thread(agent)
    approval = wait_pending(proxy, session, timeout=60)
    assert approval["rule"].startswith("email/")
    assert decide(proxy, approval["id"], "approve").status_code == 200
    return answer.result(60)


def _sendgrid_email(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> int:
    # SendGrid's client is urllib underneath: it reads the proxy and CA from the environment.
    monkeypatch.setenv("HTTPS_PROXY", proxy.proxy_url(session))
    monkeypatch.setenv("SSL_CERT_FILE", proxy.ca_bundle)
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = sendgrid.SendGridAPIClient(api_key=KEY, host=fake.base_url)
    message = Mail(
        from_email="agent@example.com",
        to_emails=["ana@example.com", "bo@example.com"],
        subject="Quarterly numbers",
        plain_text_content="the numbers are in",
    )
    return int(_approved(proxy, session, lambda: client.send(message)).status_code)


def _the_correction(body: dict[str, Any]) -> None:
    assert body == {
        "personalizations": [{"to": [{"email": "ana@example.com"}, {"email": "bo@example.com"}]}],
        "from": {"email": "agent@example.com"},
        "subject": SUBJECT,
        "content": [{"type": "text/plain", "value": TEXT}],
    }


def test_rollback_sends_the_correction_once_through_sendgrid(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sendgrid_email(proxy, fake, session, monkeypatch) == 202
    before = _outbox(fake)
    assert before[-1][1]["subject"] == "Quarterly numbers"

    report = proxy.rollback(session)
    [entry] = report["steps"]
    assert entry["status"] == "irreversible"
    assert "an email cannot be unsent" in entry["detail"]
    assert (
        f'the correction "{SUBJECT}" was sent to ana@example.com, bo@example.com'
        in (entry["detail"])
    )
    assert "answered 202" in entry["detail"]
    assert report["state"] == "rollback_incomplete"  # an email stays sent: never rolled_back
    [(provider, body)] = _outbox(fake)[len(before) :]
    assert provider == "sendgrid"
    _the_correction(body)

    again = proxy.rollback(session)
    [entry] = again["steps"]
    assert entry["status"] == "irreversible"
    assert "by an earlier rollback (HTTP 202); not sent again" in entry["detail"]
    assert len(_outbox(fake)) == len(before) + 1  # at most once
    [step] = proxy.steps(session)
    assert step["status"] == "irreversible"


def test_a_refused_correction_is_failed_and_sent_by_a_later_rollback(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sendgrid_email(proxy, fake, session, monkeypatch) == 202
    before = len(_outbox(fake))
    fake.app[protocols.REVOKED].add(KEY)  # the key was rotated after the agent's send
    try:
        [entry] = proxy.rollback(session)["steps"]
    finally:
        fake.app[protocols.REVOKED].discard(KEY)
    assert entry["status"] == "failed"
    assert f'the correction "{SUBJECT}" was NOT sent' in entry["detail"]
    assert "answered HTTP 401" in entry["detail"]
    assert "a later rollback sends it again" in entry["detail"]
    assert len(_outbox(fake)) == before
    assert KEY not in entry["detail"]

    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "irreversible"
    assert "was sent to ana@example.com, bo@example.com" in entry["detail"]
    [(_, body)] = _outbox(fake)[before:]
    _the_correction(body)


def test_a_correction_without_an_answer_is_never_sent_twice(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sendgrid_email(proxy, fake, session, monkeypatch) == 202
    before = len(_outbox(fake))
    fake.app[protocols.HANG_UP].append(True)  # delivered, then the connection drops
    try:
        [entry] = proxy.rollback(session)["steps"]
    finally:
        fake.app[protocols.HANG_UP].clear()
    assert entry["status"] == "unverified"
    assert "may have been sent" in entry["detail"]
    assert "it is never sent twice" in entry["detail"]
    assert len(_outbox(fake)) == before + 1

    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "unverified"
    assert len(_outbox(fake)) == before + 1  # not sent again: the people got it once


def test_rollback_sends_the_correction_through_resend_with_an_idempotency_key(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    email = {
        "from": "Agent <agent@example.com>",
        "to": ["ana@example.com"],
        "cc": "carl@example.com",
        "subject": "Invoice",
        "html": "<p>pay now</p>",
        "tags": [{"name": "kind", "value": "invoice"}],
    }
    with proxy.agent(session, headers={"Authorization": "Bearer re_key"}) as agent:
        r = _approved(
            proxy, session, lambda: agent.post(f"{fake.base_url}/emails", json=email, timeout=60)
        )
    assert isinstance(r, requests.Response) and r.status_code == 200, r
    before = len(_outbox(fake))

    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "irreversible"
    assert "was sent to ana@example.com, carl@example.com" in entry["detail"]
    [(provider, body)] = _outbox(fake)[before:]
    assert provider == "resend"
    assert body == {
        "from": "Agent <agent@example.com>",
        "to": ["ana@example.com"],
        "cc": "carl@example.com",
        "subject": SUBJECT,
        "text": TEXT,
    }
    [step] = proxy.steps(session)
    assert f"undoproxy-correction-{step['id']}" in fake.app[protocols.IDEMPOTENCY]


def test_a_signed_ses_email_gets_no_correction_and_says_so(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    email = {
        "FromEmailAddress": "agent@example.com",
        "Destination": {"ToAddresses": ["ana@example.com"]},
        "Content": {"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "x"}}}},
    }
    signed = {
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/ses/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=abc",
        "X-Amz-Date": "20260101T000000Z",
    }
    url = f"{fake.base_url}/v2/email/outbound-emails"
    with proxy.agent(session, headers=signed) as agent:
        r = _approved(proxy, session, lambda: agent.post(url, json=email, timeout=60))
    assert r.status_code == 200
    before = len(_outbox(fake))
    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "failed"
    assert f'the correction "{SUBJECT}" was not sent' in entry["detail"]
    assert "signed request (AWS Signature Version 4)" in entry["detail"]
    assert len(_outbox(fake)) == before


def test_the_dry_run_says_the_correction_would_be_sent(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sendgrid_email(proxy, fake, session, monkeypatch) == 202
    before = len(_outbox(fake))
    r = proxy.api("POST", f"/api/sessions/{session}/rollback", json={"dry_run": True})
    [entry] = r.json()["steps"]
    assert entry["status"] == "irreversible"
    assert f'rollback would send the correction "{SUBJECT}" to ana@example.com' in entry["detail"]
    assert len(_outbox(fake)) == before
