"""The broker in memory: what each request gets, what must never pass, reload, placeholders."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from undoproxy.broker import Broker
from undoproxy.broker.parse import parse_secrets
from undoproxy.errors import Location, UndoproxyError
from undoproxy.rules.patterns import HostPattern
from undoproxy.signing import AwsKey, Signers, SigningEntry, sign_v4
from undoproxy.yamlsource import load_text

OPENAI = "sk-real-openai-0123456789"
GITHUB = "ghp_real_github_0123456789"
KEY_ID, SECRET = "AKIAREALKEY000000001", "real/aws+secret/0123456789"
ENV = {"OPENAI_API_KEY": OPENAI, "AWS_KEY": KEY_ID, "AWS_SECRET": SECRET}
CONFIG = """
- name: openai
  host: api.openai.com
  header: Authorization
  value: "Bearer ${OPENAI_API_KEY}"
- name: github
  host: api.github.com
  header: Authorization
  value: "token ${file:gh}"
  env: GITHUB_TOKEN
  sessions: [research-*]
- name: github-everyone
  host: api.github.com
  header: Authorization
  value: "token ${file:gh}"
  env: GITHUB_TOKEN
- name: aws
  host: ["*.amazonaws.com", "127.0.0.1:9000"]
  aws: {access_key_id: "${AWS_KEY}", secret_access_key: "${AWS_SECRET}"}
  sessions: [research-*]
"""


def _broker(tmp_path: Path, signing: Signers | None = None) -> Broker:
    (tmp_path / "gh").write_text(GITHUB + "\n")
    raw = load_text(CONFIG, "config.yaml", expand=False)
    entries, errors = parse_secrets(raw, Location("config.yaml", 1), tmp_path, ENV)
    assert errors == []
    return Broker(entries, signing, environ=ENV)


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return _broker(tmp_path)


@pytest.mark.parametrize(
    ("url", "session", "headers", "signed", "names"),
    [
        ("https://api.openai.com/v1/chat", "s", {"Authorization": f"Bearer {OPENAI}"}, False,
         ("openai",)),
        ("https://api.openai.com:8443/v1", "s", {"Authorization": f"Bearer {OPENAI}"}, False,
         ("openai",)),  # a host without a port matches any port, as in rules
        ("https://openai.com/v1", "s", {}, False, ()),
        # The first entry that serves the session sets the header; the next one for the same
        # header and host is skipped.
        ("https://api.github.com/repos", "research-1", {"Authorization": f"token {GITHUB}"},
         False, ("github",)),
        ("https://api.github.com/repos", "prod", {"Authorization": f"token {GITHUB}"}, False,
         ("github-everyone",)),
        ("https://s3.us-east-1.amazonaws.com/b/k", "research-1", {}, True, ("aws",)),
        ("https://127.0.0.1:9000/b/k", "research-1", {}, True, ("aws",)),
        ("https://127.0.0.1:9001/b/k", "research-1", {}, False, ()),
        ("https://s3.us-east-1.amazonaws.com/b/k", "prod", {}, False, ()),  # not its session
        ("https://s3.us-east-1.amazonaws.com/b/k", None, {}, False, ()),
    ],
)  # fmt: skip
def test_what_a_request_gets(
    broker: Broker,
    url: str,
    session: str | None,
    headers: dict[str, str],
    signed: bool,
    names: tuple[str, ...],
) -> None:
    injection = broker.for_request(url, session)
    assert injection.headers == headers
    assert (injection.signer is not None) == signed
    assert injection.names == names
    assert OPENAI not in repr(injection) and SECRET not in repr(injection)


def test_undoproxys_own_requests_get_the_secrets_of_their_session(broker: Broker) -> None:
    used: list[tuple[str, str]] = []
    broker.on_use(lambda name, by: used.append((name, by)))
    url, headers = broker.outgoing(
        "DELETE",
        "https://api.openai.com/v1/files/f1",
        {"authorization": "Bearer undoproxy-placeholder-openai-api-key", "Accept": "*/*"},
        None,
        "s1",
    )
    assert headers == {"Accept": "*/*", "Authorization": f"Bearer {OPENAI}"}
    # Another host: the agent's placeholder stays what it is, no secret goes there.
    _, elsewhere = broker.outgoing(
        "GET", "https://evil.example/x", {"Authorization": "Bearer placeholder"}, None, "s1"
    )
    assert elsewhere == {"Authorization": "Bearer placeholder"}
    url, signed = broker.outgoing(
        "PUT", "https://127.0.0.1:9000/b/k?tagging", {"Content-Type": "text/plain"}, b"x",
        "research-2",
    )  # fmt: skip
    assert f"Credential={KEY_ID}/" in signed["Authorization"]
    key = AwsKey(KEY_ID, SECRET, "us-east-1", "s3")
    _, expected = sign_v4(key, "PUT", url, {"Content-Type": "text/plain"}, b"x")
    assert (
        signed["Authorization"].split("Signature=")[0]
        == expected["Authorization"].split("Signature=")[0]
    )
    assert used == [("openai", "undoproxy"), ("aws", "undoproxy")]
    assert broker.uses == {("openai", "undoproxy"): 1, ("aws", "undoproxy"): 1}


def test_signing_entries_come_before_the_secrets_aws_keys(tmp_path: Path) -> None:
    own = SigningEntry(HostPattern.parse("127.0.0.1:9000"), AwsKey("AKIDOWN", "o" * 20, "r", "s3"))
    broker = _broker(tmp_path, Signers((own,)))
    assert broker.signers.for_url("https://127.0.0.1:9000/b", "research-1") is own
    aws = broker.signers.for_url("https://s3.eu-west-1.amazonaws.com/b", "research-1")
    assert aws is not None and aws.secret == "aws"
    assert aws.describe() == "secret aws for *.amazonaws.com"  # never the key id
    assert broker.signers.for_url("https://s3.eu-west-1.amazonaws.com/b", "prod") is None


@pytest.mark.parametrize(
    ("places", "found"),
    [
        ([("the X-Key header", f"Bearer {OPENAI}")], ("openai", "the X-Key header")),
        ([("the URL", f"https://x.example/?k={OPENAI}")], ("openai", "the URL")),
        ([("the body", f'{{"k": "{SECRET}"}}'.encode())], ("aws", "the body")),
        ([("the body", b"k=real%2Faws%2Bsecret%2F0123456789")], ("aws", "the body")),  # form
        ([("the body", b"k=real%2Faws%2Bsecret%2F012345678")], None),  # one character short
        ([("the URL", "https://api.openai.com/v1"), ("the body", b"")], None),
        ([("the Authorization header", f"AWS4-HMAC-SHA256 Credential={KEY_ID}/2026")],
         ("aws", "the Authorization header")),
    ],
)  # fmt: skip
def test_real_values_are_found_wherever_the_agent_put_them(
    broker: Broker, places: list[tuple[str, str | bytes]], found: tuple[str, str] | None
) -> None:
    got = broker.find(places)
    assert (None if got is None else (got.secret, got.where)) == found


def test_scrub(broker: Broker) -> None:
    assert broker.scrub(f"a {OPENAI} b {SECRET}") == "a [secret openai] b [secret aws]"
    assert broker.scrub_bytes(GITHUB.encode(), broker.placeholder_of) == (
        b"undoproxy-placeholder-github-token"
    )


def test_a_placeholder_from_a_session_the_entry_does_not_serve(broker: Broker) -> None:
    auth = "AWS4-HMAC-SHA256 Credential=UNDOPROXYPLACEHOLDER/20260101/us-east-1/s3/aws4_request"
    url = "https://s3.us-east-1.amazonaws.com/b"
    assert broker.misused_placeholder(url, "prod", [auth]) == "aws"
    assert broker.misused_placeholder(url, "research-1", [auth]) is None
    assert broker.misused_placeholder(url, "prod", ["AWS4-HMAC-SHA256 Credential=AKIAOWN/"]) is None


def test_placeholders_per_session(broker: Broker) -> None:
    assert broker.variables("prod") == [
        ("OPENAI_API_KEY", "undoproxy-placeholder-openai-api-key"),
        ("GITHUB_TOKEN", "undoproxy-placeholder-github-token"),
        # The aws entry is not prod's; what its key is read from is emptied all the same.
        ("AWS_KEY", ""),
        ("AWS_SECRET", ""),
    ]
    assert dict(broker.variables("research-1"))["AWS_ACCESS_KEY_ID"] == "UNDOPROXYPLACEHOLDER"
    described = broker.describe()
    assert [d["name"] for d in described] == ["openai", "github", "github-everyone", "aws"]
    assert OPENAI not in str(described) and KEY_ID not in str(described)


def test_reload_is_all_or_nothing(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    (tmp_path / "gh").write_text("ghp_rotated_0123456789\n")
    assert broker.reload() == []
    assert broker.for_request("https://api.github.com/", "x").headers == {
        "Authorization": "token ghp_rotated_0123456789"
    }
    (tmp_path / "gh").unlink()
    errors = broker.reload()
    assert len(errors) == 2 and "does not exist" in errors[0] and "github" in errors[0]
    # Nothing changed: the values in use stay.
    assert broker.for_request("https://api.github.com/", "x").headers == {
        "Authorization": "token ghp_rotated_0123456789"
    }


def test_a_broker_that_cannot_read_its_secrets_does_not_start(tmp_path: Path) -> None:
    raw = load_text(CONFIG, "config.yaml", expand=False)
    (tmp_path / "gh").write_text(GITHUB)
    entries, _ = parse_secrets(raw, Location("config.yaml", 1), tmp_path, ENV)
    with pytest.raises(UndoproxyError, match="AWS_SECRET is not set") as caught:
        Broker(entries, environ={k: v for k, v in ENV.items() if k != "AWS_SECRET"})
    assert OPENAI not in str(caught.value)


def test_who_holds_a_real_value_from_digests_only(broker: Broker) -> None:
    salt = b"s" * 16

    def digest(value: str) -> str:
        return hmac.new(salt, value.encode(), hashlib.sha256).hexdigest()

    found = broker.holders(salt, {"MY_KEY": digest(OPENAI), "OTHER": digest("harmless-value")})
    assert [(f.secret, f.where) for f in found] == [("openai", "MY_KEY")]
