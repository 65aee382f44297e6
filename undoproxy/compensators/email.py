"""The email pack's correction: the same provider, the same recipients, another message.

An email cannot be unsent. With `packs: [{name: email, correction: {subject, text}}]` rollback
also sends `text` under `subject` to everyone the agent's email went to, from the same sender,
through the same API: one builder per provider, each given the agent's request (Facts) and
returning the correction in the journal's form, or raising Irreversible saying why none can be
built. The request is built when the agent's email is answered 2xx (nothing is sent for an
email that was not), and sent by rollback at most once (see `undoproxy/rollback/correction.py`).

Providers (the request shapes their APIs document):
    sendgrid        POST /v3/mail/send, JSON: every personalization's to/cc/bcc, `from`
    mailgun         POST /v3/{domain}/messages, form: from, to, cc, bcc (each repeatable)
    mailgun-mime    the same domain's /messages (form): from taken from the MIME message
    postmark        POST /email, JSON: From, To, Cc, Bcc, ReplyTo, MessageStream
    postmark-batch  POST /email/batch: one correction per message of the batch
    resend          POST /emails, JSON: from, to, cc, bcc, reply_to (and an Idempotency-Key)
    ses             POST /v2/email/outbound-emails, JSON: FromEmailAddress, Destination
"""

from __future__ import annotations

import email.parser
import email.policy
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from undoproxy.compensators.model import Facts, Irreversible, inverse_request

Spec = dict[str, str]  # {provider, subject, text}
Builder = Callable[[Facts, Spec], tuple[dict[str, Any], list[str]]]


def correction(facts: Facts, spec: Spec) -> dict[str, Any]:
    """The correction of one sent email: {request, to, subject}, or {problem} saying why not.

    `spec` is the pack's `correction:` with `provider`: the email rule it came from. For a
    provider that takes an idempotency key, `idempotency_key` asks rollback to send one derived
    from the step (the same on every attempt).
    """
    builder = BUILDERS.get(spec.get("provider", ""))
    if builder is None:
        return {"problem": f"no correction is known for {spec.get('provider')!r}"}
    try:
        request, recipients = builder(facts, spec)
    except Irreversible as exc:
        return {"problem": str(exc), "subject": spec["subject"]}
    if not recipients:
        return {"problem": "the email names no recipient", "subject": spec["subject"]}
    out: dict[str, Any] = {"request": request, "to": recipients, "subject": spec["subject"]}
    if spec["provider"] in TAKES_IDEMPOTENCY_KEY:
        out["idempotency_key"] = True
    return out


def _body(facts: Facts) -> dict[str, Any]:
    body = facts.request_json
    if not isinstance(body, dict):
        raise Irreversible("the email's request body is not a JSON object")
    return body


def _addresses(value: Any) -> list[str]:
    """Addresses as the APIs give them: "a@x", "A <a@x>", "a@x, b@y", {email}, lists of them."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, dict):
        return _addresses(value.get("email") or value.get("Email"))
    if isinstance(value, list):
        return [a for item in value for a in _addresses(item)]
    return []


def _sendgrid(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    body = _body(facts)
    if not body.get("from"):
        raise Irreversible("the email names no sender (from)")
    people: list[dict[str, Any]] = []
    for p in body.get("personalizations") or []:
        if isinstance(p, dict):
            kept = {k: p[k] for k in ("to", "cc", "bcc") if p.get(k)}
            if p.get("from"):
                kept["from"] = p["from"]
            if kept.get("to"):
                people.append(kept)
    if not people:
        raise Irreversible("the email has no personalization with recipients")
    out: dict[str, Any] = {
        "personalizations": people,
        "from": body["from"],
        "subject": spec["subject"],
        "content": [{"type": "text/plain", "value": spec["text"]}],
    }
    if body.get("reply_to"):
        out["reply_to"] = body["reply_to"]
    to = [a for p in people for k in ("to", "cc", "bcc") for a in _addresses(p.get(k))]
    return inverse_request("POST", facts.url, out), to


def _form(facts: Facts) -> list[tuple[str, str]]:
    try:
        text = facts.request_body.decode()
        return parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise Irreversible(
            "the email's request body is not an application/x-www-form-urlencoded form "
            "(a multipart/form-data send cannot be corrected automatically)"
        ) from None


def _mailgun(
    facts: Facts, spec: Spec, sender: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    fields = _form(facts)
    sender = sender or next((v for k, v in fields if k == "from"), None)
    if not sender:
        raise Irreversible("the email names no sender (from)")
    people = [(k, v) for k, v in fields if k in ("to", "cc", "bcc") and v]
    if not any(k == "to" for k, _ in people):
        raise Irreversible("the email names no recipient (to)")
    pairs = [("from", sender), *people, ("subject", spec["subject"]), ("text", spec["text"])]
    url = facts.url
    parts = urlsplit(url)
    if parts.path.endswith("/messages.mime"):
        url = urlunsplit((*parts[:2], parts.path[: -len(".mime")], parts.query, ""))
    out = inverse_request(
        "POST", url, urlencode(pairs).encode(), "application/x-www-form-urlencoded"
    )
    return out, [a for _, v in people for a in _addresses(v)]


def _mailgun_mime(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    message = next((v for k, v in _form(facts) if k == "message"), None)
    parsed = email.parser.Parser(policy=email.policy.default).parsestr(
        message or "", headersonly=True
    )
    sender = parsed.get("From")
    if not sender:
        raise Irreversible("the MIME message names no sender (From)")
    return _mailgun(facts, spec, str(sender))


def _postmark_message(message: Any, spec: Spec) -> dict[str, Any]:
    if not isinstance(message, dict) or not message.get("From") or not message.get("To"):
        raise Irreversible("a message names no sender (From) or no recipient (To)")
    keys = ("From", "To", "Cc", "Bcc", "ReplyTo", "MessageStream")
    out = {k: message[k] for k in keys if message.get(k)}
    return {**out, "Subject": spec["subject"], "TextBody": spec["text"]}


def _postmark(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    out = _postmark_message(_body(facts), spec)
    to = [a for k in ("To", "Cc", "Bcc") for a in _addresses(out.get(k))]
    return inverse_request("POST", facts.url, out), to


def _postmark_batch(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    messages = facts.request_json
    if not isinstance(messages, list) or not messages:
        raise Irreversible("the batch's request body is not a list of messages")
    out = [_postmark_message(m, spec) for m in messages]
    to = [a for m in out for k in ("To", "Cc", "Bcc") for a in _addresses(m.get(k))]
    return inverse_request("POST", facts.url, out), to


def _resend(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    body = _body(facts)
    if not body.get("from") or not body.get("to"):
        raise Irreversible("the email names no sender (from) or no recipient (to)")
    out = {k: body[k] for k in ("from", "to", "cc", "bcc", "reply_to") if body.get(k)}
    out.update(subject=spec["subject"], text=spec["text"])
    to = [a for k in ("to", "cc", "bcc") for a in _addresses(out.get(k))]
    return inverse_request("POST", facts.url, out), to


def _ses(facts: Facts, spec: Spec) -> tuple[dict[str, Any], list[str]]:
    body = _body(facts)
    destination = body.get("Destination")
    if not body.get("FromEmailAddress") or not isinstance(destination, dict):
        raise Irreversible("the email names no FromEmailAddress or no Destination")
    keys = ("ToAddresses", "CcAddresses", "BccAddresses")
    dest = {k: destination[k] for k in keys if destination.get(k)}
    out: dict[str, Any] = {
        "FromEmailAddress": body["FromEmailAddress"],
        "Destination": dest,
        "Content": {
            "Simple": {
                "Subject": {"Data": spec["subject"]},
                "Body": {"Text": {"Data": spec["text"]}},
            }
        },
    }
    for key in ("ReplyToAddresses", "ConfigurationSetName"):
        if body.get(key):
            out[key] = body[key]
    to = [a for k in dest for a in _addresses(dest[k])]
    return inverse_request("POST", facts.url, out), to


# Resend answers a repeated Idempotency-Key with the first answer, sending nothing again.
TAKES_IDEMPOTENCY_KEY = frozenset({"resend"})
BUILDERS: dict[str, Builder] = {
    "sendgrid": _sendgrid,
    "mailgun": _mailgun,
    "mailgun-mime": _mailgun_mime,
    "postmark": _postmark,
    "postmark-batch": _postmark_batch,
    "resend": _resend,
    "ses": _ses,
}
