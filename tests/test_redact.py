"""Redaction: secrets never shown, meaning never destroyed, hostile bodies never a 500."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from undoproxy import redact

SECRET = "s3cr3t-VALUE-42"

SECRET_NAMES = [
    "key",
    "sig",
    "signature",
    "code",
    "client_secret",
    "refresh_token",
    "access_token",
    "id_token",
    "private_key",
    "api_key",
    "apikey",
    "apiKey",
    "APIKey",
    "x-api-key",
    "X-Goog-Api-Key",
    "password",
    "new_password",
    "passwd",
    "token",
    "auth",
    "Authorization",
    "Proxy-Authorization",
    "session",
    "session_id",
    "sessionid",
    "JSESSIONID",
    "cookie",
    "Set-Cookie",
    "x-amz-signature",
    "X-Amz-Signature",
    "x-amz-credential",
    "X-Amz-Security-Token",
    "X-CSRF-Token",
    "csrfmiddlewaretoken",
    "accessToken",
    "oauth_token",
    "authorization_code",
    "code_verifier",
    "api_keys",
    "card[number]",
    "card[cvc]",
    "filter[api_key]",
    "user.password",
    "credentials",
    "passphrase",
    "key_value",
    "key_material",
    "token_value",
    "token_hash",
    "oauth_token_secret",
    "password_confirmation",
    "authentication",
    "X-Hub-Signature-256",
    "Ocp-Apim-Subscription-Key",
]

PLAIN_NAMES = [
    "max_tokens",
    "max_token",
    "prompt_tokens",
    "completion_tokens",
    "usage.total_tokens",
    "total_tokens",
    "input_tokens",
    "cache_creation_input_tokens",
    "totalTokenCount",
    "promptTokenCount",
    "maxOutputTokens",
    "tokenizer",
    "tokens",
    "token_count",
    "token_type",
    "key_count",
    "num_keys",
    "keys",
    "monkey",
    "hockey",
    "keyboard",
    "status_code",
    "error_code",
    "country_code",
    "code_challenge",
    "code_challenge_method",
    "author",
    "authority",
    "WWW-Authenticate",
    "auth_type",
    "auth_url",
    "signature_method",
    "X-Amz-SignedHeaders",
    "X-Amz-Date",
    "Idempotency-Key",
    "public_key",
    "sort_key",
    "next_page_token",
    "pageToken",
    "sessions",
    "session_timeout",
    "password_min_length",
    "secret_name",
    "Content-Type",
    "email",
    "key_points",
    "keyFindings",
    "key_id",
    "token_ids",
    "prompt_token_ids",
    "token_type_ids",
    "token_logprobs",
    "token_budget",
    "budget_tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-tokens-remaining",
    "thoughtsTokenCount",
    "",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_secret(name: str) -> None:
    assert redact.is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_carry_meaning_are_not(name: str) -> None:
    assert not redact.is_secret_name(name)


@pytest.mark.parametrize("name", ["x-api-key", "X-Amz-Security-Token", "accessToken"])
def test_names_split_on_separators_and_case(name: str) -> None:
    assert redact.name_parts(name)[-1] in ("key", "token")


def test_llm_usage_stays_readable_while_the_key_is_hidden() -> None:
    body = {
        "model": "m",
        "max_tokens": 512,
        "api_key": SECRET,
        "usage": {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33},
    }
    shown = redact.body_text(json.dumps(body).encode(), "application/json")
    assert shown is not None and SECRET not in shown
    assert json.loads(shown)["usage"] == body["usage"]
    assert json.loads(shown)["max_tokens"] == 512


@pytest.mark.parametrize(
    "value",
    [["a", {"b": SECRET}], {"nested": {"deeper": SECRET}}, SECRET, 42, None],
)
def test_everything_under_a_secret_key_is_redacted_whole(value: Any) -> None:
    assert redact.json_value({"password": value, "n": 1}) == {"password": "[redacted]", "n": 1}


def test_secret_named_name_value_entries_hide_their_value() -> None:
    pairs = [
        {"name": "DB_PASSWORD", "value": SECRET},
        {"name": "HOME", "value": "/root"},
        {"Key": "api_key", "Value": SECRET},
        {"key": "Authorization", "value": SECRET},
    ]
    shown = redact.json_value(pairs)
    assert SECRET not in json.dumps(shown)
    assert shown[0] == {"name": "DB_PASSWORD", "value": "[redacted]"}
    assert shown[1] == {"name": "HOME", "value": "/root"}


def test_a_body_with_a_lone_surrogate_is_shown_as_encodable_text() -> None:
    shown = redact.body_text(b'{"a": "\\ud800", "b": "caf\xc3\xa9"}')
    assert shown is not None
    shown.encode("utf-8")
    assert json.loads(shown) == {"a": "\ud800", "b": "caf\u00e9"}


def test_urls_inside_json_strings_are_redacted() -> None:
    shown = redact.json_value({"next": f"https://api.test/x?access_token={SECRET}&page=2"})
    assert shown == {"next": "https://api.test/x?access_token=%5Bredacted%5D&page=2"}


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (f"https://api.test/a?api_key={SECRET}&q=1", "https://api.test/a?api_key=%5Bredacted%5D&q=1"),
        (f"https://api.test/a?key={SECRET}", "https://api.test/a?key=%5Bredacted%5D"),
        (f"https://api.test/a?sig={SECRET}&b=a+b%20c", "https://api.test/a?sig=%5Bredacted%5D&b=a+b%20c"),
        (f"https://app.test/cb?code={SECRET}&state=xyz", "https://app.test/cb?code=%5Bredacted%5D&state=xyz"),
        (f"https://u:{SECRET}@api.test/", "https://%5Bredacted%5D@api.test/"),
        (f"https://u:p@{SECRET}@api.test/", "https://%5Bredacted%5D@api.test/"),
        (f"https://app.test/cb#access_token={SECRET}&x=1", "https://app.test/cb#access_token=%5Bredacted%5D&x=1"),
        (f"https://app.test/a;jsessionid={SECRET}", "https://app.test/a;jsessionid=%5Bredacted%5D"),
        (f"https://api.test/a?x=1;token={SECRET}", "https://api.test/a?x=1;token=%5Bredacted%5D"),
        (f"https://api.test/a?card%5Bnumber%5D={SECRET}", "https://api.test/a?card%5Bnumber%5D=%5Bredacted%5D"),
        (f"http://[::1/x?token={SECRET}", "http://[::1/x?token=%5Bredacted%5D"),
        ("https://api.test/v1/chat?max_tokens=5&flag", "https://api.test/v1/chat?max_tokens=5&flag"),
        ("/relative?pageToken=abc&token=", "/relative?pageToken=abc&token="),
    ],
)  # fmt: skip
def test_url(given: str, shown: str) -> None:
    assert redact.url(given) == shown


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (f"grant_type=authorization_code&code={SECRET}&client_secret={SECRET}x", ""),
        (f"username=a&password={SECRET}", "application/x-www-form-urlencoded"),
        (f"username=a&password={SECRET}+with+spaces", "application/x-www-form-urlencoded"),
        (f"card%5Bnumber%5D={SECRET}&card%5Bcvc%5D=123", "application/x-www-form-urlencoded"),
        (f"note: use this\npassword={SECRET}\n", "text/plain"),
        (f"Authorization: Bearer {SECRET}\n", "text/plain"),
        (f"token: {SECRET}\n", "application/yaml"),
        (f"<login><password>{SECRET}</password></login>", "application/xml"),
        (f'{{"a": 1}}\n{{"api_key": "{SECRET}"}}\n', "application/x-ndjson"),
        (f'{{"password": [1, "{SECRET}"], "x": 1', "application/json"),  # cut short
        (
            '--b0\r\nContent-Disposition: form-data; name="password"\r\n\r\n'
            f"{SECRET}\r\n--b0--\r\n",
            "multipart/form-data; boundary=b0",
        ),
        (f'--b0\r\nContent-Disposition: form-data; name="api_key"\r\n\r\n{SECRET}\r\n--b0--', ""),
    ],
)
def test_form_and_text_bodies_hide_secrets(body: str, content_type: str) -> None:
    shown = redact.body_text(body.encode(), content_type)
    assert shown is not None and SECRET not in shown and "redacted" in shown


def test_a_form_keeps_what_is_not_secret_as_written() -> None:
    body = b"grant_type=authorization_code&redirect_uri=https%3A%2F%2Fapp.test%2Fcb&code=abc"
    assert redact.body_text(body, "application/x-www-form-urlencoded") == (
        "grant_type=authorization_code&redirect_uri=https%3A%2F%2Fapp.test%2Fcb&code=%5Bredacted%5D"
    )


def test_headers() -> None:
    shown = redact.headers(
        [
            ("Authorization", f"Bearer {SECRET}"),
            ("X-Amz-Security-Token", SECRET),
            ("Location", f"https://app.test/cb?code={SECRET}"),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Idempotency-Key", "k-1"),
        ]
    )
    assert SECRET not in repr(shown)
    assert ("Content-Type", "text/plain; charset=utf-8") in shown
    assert ("Idempotency-Key", "k-1") in shown


def test_credential_headers_keep_the_secrets_for_replay() -> None:
    kept = redact.credential_headers([("Authorization", "Bearer x"), ("Accept", "*/*")])
    assert kept == {"Authorization": "Bearer x"}


@pytest.mark.parametrize(
    "message",
    [
        f"GET https://api.test/x?access_token={SECRET} answered HTTP 500",
        f"POST https://bot:{SECRET}@api.test/x: ClientConnectorError",
        f"upstream said: api_key={SECRET} is invalid",
    ],
)
def test_error_texts_hide_secrets(message: str) -> None:
    shown = redact.text(message)
    assert SECRET not in shown and "redacted" in shown


DEEP = "[" * 100_000
DEEP_OBJECT = '{"a":' * 100_000


def _deeply_nested(levels: int) -> Any:
    value: Any = SECRET
    for _ in range(levels):
        value = {"password": SECRET, "a": [value]}
    return value


@pytest.mark.parametrize(
    "call",
    [
        lambda s: redact.body_text(s.encode(), "application/json"),
        lambda s: redact.body_text(s.encode(), ""),
        lambda s: redact.body_text(s.encode(), "application/x-www-form-urlencoded"),
        lambda s: redact.body_text(s.encode(), "multipart/form-data; boundary=" + s[:80]),
        redact.text,
        redact.url,
        redact.query,
        redact.is_secret_name,
        redact.name_parts,
        redact.not_parsed,
        lambda s: redact.headers([(s, s), ("X", s)]),
        lambda s: redact.credential_headers([(s, s)]),
        lambda s: redact.json_value(s),
        lambda s: redact.json_value({s: [s]}),
    ],
)
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT, "{" * 100_000, '"' * 100_000])
def test_deep_or_hostile_input_never_raises(call: Callable[[str], object], body: str) -> None:
    call(body)


def test_a_deep_json_body_is_shown_truncated_with_a_note() -> None:
    shown = redact.body_text(DEEP.encode(), "application/json")
    assert shown is not None
    assert len(shown) < 3000
    assert "not parsed" in shown and "nested deeper than 64" in shown


def test_a_body_just_under_the_limit_is_parsed() -> None:
    body = "[" * redact.MAX_DEPTH + "]" * redact.MAX_DEPTH
    assert json.loads(redact.body_text(body.encode()) or "") == json.loads(body)
    too_deep = "[" + body + "]"
    assert "not parsed" in (redact.body_text(too_deep.encode()) or "")


def test_secrets_in_a_deep_body_stay_hidden() -> None:
    body = json.dumps(_deeply_nested(200))  # parses, but deeper than the limit
    shown = redact.body_text(body.encode(), "application/json")
    assert shown is not None and "not parsed" in shown and SECRET not in shown


def test_json_value_of_a_deep_structure_is_cut_with_a_note() -> None:
    shown = redact.json_value(_deeply_nested(100_000))
    assert SECRET not in json.dumps(shown)
    assert redact.TOO_DEEP in json.dumps(shown)


def test_loads_refuses_deep_json_with_a_value_error() -> None:
    for body in (DEEP, "[" * 100 + "]" * 100):
        with pytest.raises(ValueError, match="nested deeper"):
            redact.loads(body)
    assert redact.loads('{"a": [1]}') == {"a": [1]}


def test_binary_and_empty_bodies() -> None:
    assert redact.body_text(None) is None
    assert redact.body_text(b"") == ""
    assert redact.body_text(b"\xff\xfe\x00") == "<3 bytes of binary data>"


async def test_the_unmatched_mutation_log_line_hides_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mitmproxy.test import tflow

    from undoproxy.proxy.gate import Gate
    from undoproxy.proxy.state import KEY, FlowState
    from undoproxy.rules import RuleSet

    flow = tflow.tflow()
    flow.request.method = "POST"
    flow.request.url = f"https://api.test/v1/charges?api_key={SECRET}&amount=5"
    flow.metadata[KEY] = FlowState(session_id="s1", is_mutation=True)
    with caplog.at_level("INFO", logger="undoproxy.proxy.gate"):
        await Gate(RuleSet(), "log", holder=None).request(flow)
    assert "mutation matched no rule" in caplog.text
    assert SECRET not in caplog.text and "amount=5" in caplog.text


def _leaky_step() -> Any:
    from undoproxy.store.records import Step

    return Step(
        id="st1",
        session_id="s1",
        seq=1,
        method="POST",
        url=f"https://bot:{SECRET}@api.test/v1/x?access_token={SECRET}",
        is_mutation=True,
        status="done",
        captures={"token": SECRET, "id": "42"},
        request_headers=[["Content-Type", "application/json"], ["X-Amz-Security-Token", SECRET]],
        request_body=DEEP.encode(),
        response_status=201,
        response_headers=[["Location", f"https://api.test/v1/x/42?sig={SECRET}"]],
        response_body=json.dumps({"id": "42", "usage": {"total_tokens": 7}}).encode(),
        error=f"GET https://api.test/v1/x?api_key={SECRET} answered HTTP 500",
        snapshot={"url": f"https://api.test/v1/x?key={SECRET}", "status": 200},
        compensation={
            "kind": "delete-created",
            "method": "DELETE",
            "url": "https://api.test/v1/x/42",
        },
        compensation_status="failed",
        compensation_detail=f"DELETE https://api.test/v1/x/42?token={SECRET} answered 500",
    )


def test_the_api_and_exports_show_no_secret_and_keep_the_counts() -> None:
    from undoproxy.admin import export, views
    from undoproxy.store.records import Session

    step = _leaky_step()
    shown = json.dumps(views.step_json(step))
    har = json.dumps(export.har(Session(id="s1", token="t"), [step]))
    for text in (shown, har):
        assert SECRET not in text
        assert "total_tokens" in text
    # The page and API say the body was too deep to parse; the HAR carries it as sent.
    assert "not parsed" in shown
    assert views.step_json(step)["captures"] == {"token": "[redacted]", "id": "42"}


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://api.test/x?access_token={SECRET}",
        f"https://u:{SECRET}@:8443/x",
        f"https://api.test:99999/x?key={SECRET}",
        f"https://[::1]x/?sig={SECRET}",
    ],
)
def test_the_rules_engine_errors_name_the_url_redacted(url: str) -> None:
    from undoproxy.rules import RequestView

    with pytest.raises(ValueError) as info:
        RequestView.from_parts("GET", url, {}, b"")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("kind", "url", "response"),
    [
        ("delete-created", "https://api.test/c", {"Location": f"/c/../x?sig={SECRET}"}),
        (
            "delete-created",
            "https://api.test/c",
            {"Location": f"https://evil.test/c/1?key={SECRET}"},
        ),
        ("delete-created", "https://api.test/c/1", {"Location": f"/c?access_token={SECRET}"}),
        ("delete-created", f"https://bot:{SECRET}@api.test/c", {}),
        ("github.delete-comment", f"https://bot:{SECRET}@api.test/x?token={SECRET}", {}),
    ],
)
def test_why_a_step_is_irreversible_names_urls_redacted(
    kind: str, url: str, response: dict[str, str]
) -> None:
    from undoproxy.compensators import build
    from undoproxy.compensators.model import Facts, Plan

    plan = Plan(kind)
    facts = Facts("POST", url, response_status=201, response_headers=response)
    comp = build.complete(plan, build.prepare(plan, facts), facts)
    assert comp.get("reason") and SECRET not in comp["reason"]
