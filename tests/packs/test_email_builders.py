"""The email correction builders, one per provider: plain data in, the correction out.

Each takes the agent's request as the provider's API documents it and must keep exactly the
sender and the recipients (to, cc, bcc), with the configured subject and text instead of the
original message; what cannot be corrected says why.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from tests.compensators.helpers import sent
from undoproxy.compensators.email import correction
from undoproxy.compensators.model import Facts

S, T = "Correction", "Please disregard."


def _facts(url: str, body: Any) -> Facts:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Facts("POST", url, request_body=raw, response_status=200)


def decoded(request: dict[str, Any]) -> Any:
    """The body of the correction: JSON parsed, a form as text."""
    body = sent(request)["body"]
    return (
        body.decode()
        if request["content_type"].startswith("application/x-www")
        else json.loads(body)
    )


def _spec(provider: str) -> dict[str, str]:
    return {"provider": provider, "subject": S, "text": T}


def test_sendgrid_keeps_every_personalization_s_recipients_and_the_sender() -> None:
    body = {
        "personalizations": [
            {
                "to": [{"email": "a@x.test", "name": "A"}],
                "cc": [{"email": "c@x.test"}],
                "dynamic_template_data": {"secret": 1},
                "subject": "per-person",
            },
            {"to": [{"email": "b@x.test"}], "bcc": [{"email": "d@x.test"}]},
        ],
        "from": {"email": "bot@x.test", "name": "Bot"},
        "reply_to": {"email": "help@x.test"},
        "template_id": "d-123",
        "subject": "Original",
    }
    out = correction(_facts("https://api.sendgrid.com/v3/mail/send", body), _spec("sendgrid"))
    assert out["to"] == ["a@x.test", "c@x.test", "b@x.test", "d@x.test"]
    assert out["request"]["method"] == "POST"
    assert out["request"]["url"] == "https://api.sendgrid.com/v3/mail/send"
    assert decoded(out["request"]) == {
        "personalizations": [
            {"to": [{"email": "a@x.test", "name": "A"}], "cc": [{"email": "c@x.test"}]},
            {"to": [{"email": "b@x.test"}], "bcc": [{"email": "d@x.test"}]},
        ],
        "from": {"email": "bot@x.test", "name": "Bot"},
        "subject": S,
        "content": [{"type": "text/plain", "value": T}],
        "reply_to": {"email": "help@x.test"},
    }


def test_mailgun_keeps_repeated_recipients_of_the_form() -> None:
    form = urlencode(
        [("from", "Bot <bot@x.test>"), ("to", "a@x.test"), ("to", "b@x.test, c@x.test"),
         ("bcc", "d@x.test"), ("subject", "Original"), ("text", "hi"), ("o:tag", "t")]
    ).encode()  # fmt: skip
    out = correction(
        _facts("https://api.mailgun.net/v3/mg.x.test/messages", form), _spec("mailgun")
    )
    assert out["to"] == ["a@x.test", "b@x.test", "c@x.test", "d@x.test"]
    assert out["request"]["content_type"] == "application/x-www-form-urlencoded"
    assert parse_qsl(decoded(out["request"])) == [
        ("from", "Bot <bot@x.test>"),
        ("to", "a@x.test"),
        ("to", "b@x.test, c@x.test"),
        ("bcc", "d@x.test"),
        ("subject", S),
        ("text", T),
    ]


def test_a_mailgun_mime_send_is_corrected_through_messages_with_the_mime_sender() -> None:
    mime = "From: Bot <bot@x.test>\r\nTo: a@x.test\r\nSubject: Original\r\n\r\nhello"
    form = urlencode([("to", "a@x.test"), ("message", mime)]).encode()
    url = "https://api.eu.mailgun.net/v3/mg.x.test/messages.mime"
    out = correction(_facts(url, form), _spec("mailgun-mime"))
    assert out["request"]["url"] == "https://api.eu.mailgun.net/v3/mg.x.test/messages"
    fields = dict(parse_qsl(decoded(out["request"])))
    assert (fields["from"], fields["to"], fields["subject"]) == ("Bot <bot@x.test>", "a@x.test", S)


def test_postmark_single_and_batch() -> None:
    one = {"From": "bot@x.test", "To": "a@x.test, b@x.test", "Cc": "c@x.test", "Subject": "O",
           "HtmlBody": "<b>x</b>", "MessageStream": "outbound", "Tag": "t"}  # fmt: skip
    out = correction(_facts("https://api.postmarkapp.com/email", one), _spec("postmark"))
    assert out["to"] == ["a@x.test", "b@x.test", "c@x.test"]
    assert decoded(out["request"]) == {
        "From": "bot@x.test",
        "To": "a@x.test, b@x.test",
        "Cc": "c@x.test",
        "MessageStream": "outbound",
        "Subject": S,
        "TextBody": T,
    }
    batch = [one, {"From": "bot@x.test", "To": "z@x.test", "Subject": "O2", "TextBody": "y"}]
    url = "https://api.postmarkapp.com/email/batch"
    out = correction(_facts(url, batch), _spec("postmark-batch"))
    assert out["to"] == ["a@x.test", "b@x.test", "c@x.test", "z@x.test"]
    assert [m["To"] for m in decoded(out["request"])] == ["a@x.test, b@x.test", "z@x.test"]


def test_resend_asks_for_an_idempotency_key() -> None:
    body = {"from": "bot@x.test", "to": ["a@x.test"], "bcc": ["b@x.test"], "subject": "O",
            "html": "<p/>", "scheduled_at": "in 1 hour"}  # fmt: skip
    out = correction(_facts("https://api.resend.com/emails", body), _spec("resend"))
    assert out["idempotency_key"] is True
    assert decoded(out["request"]) == {
        "from": "bot@x.test",
        "to": ["a@x.test"],
        "bcc": ["b@x.test"],
        "subject": S,
        "text": T,
    }


def test_ses_v2_keeps_the_destination_and_the_configuration_set() -> None:
    body = {
        "FromEmailAddress": "bot@x.test",
        "Destination": {"ToAddresses": ["a@x.test"], "CcAddresses": ["c@x.test"]},
        "ConfigurationSetName": "prod",
        "Content": {"Template": {"TemplateName": "welcome", "TemplateData": "{}"}},
    }
    url = "https://email.eu-west-1.amazonaws.com/v2/email/outbound-emails"
    out = correction(_facts(url, body), _spec("ses"))
    assert out["to"] == ["a@x.test", "c@x.test"]
    assert decoded(out["request"]) == {
        "FromEmailAddress": "bot@x.test",
        "Destination": {"ToAddresses": ["a@x.test"], "CcAddresses": ["c@x.test"]},
        "Content": {"Simple": {"Subject": {"Data": S}, "Body": {"Text": {"Data": T}}}},
        "ConfigurationSetName": "prod",
    }


@pytest.mark.parametrize(
    ("provider", "url", "body", "problem"),
    [
        ("sendgrid", "/v3/mail/send", {"personalizations": [{"to": []}], "from": {"email": "b"}},
         "no personalization with recipients"),
        ("sendgrid", "/v3/mail/send", {"personalizations": [{"to": [{"email": "a"}]}]},
         "no sender (from)"),
        ("mailgun", "/v3/d/messages", b"--boundary\r\nContent-Disposition: form-data",
         "multipart/form-data send cannot be corrected"),
        ("postmark", "/email", {"From": "b@x.test"}, "no recipient (To)"),
        ("resend", "/emails", ["not", "an", "object"], "not a JSON object"),
        ("ses", "/v2/email/outbound-emails", {"FromEmailAddress": "b"}, "no Destination"),
    ],
    ids=["sendgrid-no-recipient", "sendgrid-no-from", "mailgun-multipart", "postmark-no-to",
         "resend-not-object", "ses-no-destination"],
)  # fmt: skip
def test_what_cannot_be_corrected_says_why(
    provider: str, url: str, body: Any, problem: str
) -> None:
    out = correction(_facts("https://mail.test" + url, body), _spec(provider))
    assert "request" not in out
    assert problem in out["problem"]
