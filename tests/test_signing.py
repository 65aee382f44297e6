"""undoproxy's SigV4 signer agrees with botocore's, and drops the agent's own signature."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from undoproxy.config import load_config
from undoproxy.errors import ConfigErrors
from undoproxy.rules.patterns import HostPattern
from undoproxy.signing import AwsKey, Signers, SigningEntry, agent_scope, sign_v4

NOW = datetime.datetime(2026, 5, 17, 12, 30, 5, tzinfo=datetime.UTC)
KEY = AwsKey("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "eu-west-1", "s3")


def botocore_signature(
    key: AwsKey, method: str, url: str, headers: dict[str, str], body: bytes
) -> str:
    """The Authorization header botocore computes for the request we send."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    request.context["timestamp"] = headers["X-Amz-Date"]
    auth_class = S3SigV4Auth if key.service == "s3" else SigV4Auth
    auth = auth_class(
        Credentials(key.access_key_id, key.secret_access_key), key.service, key.region
    )
    signed = [
        h.strip()
        for h in headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    ]
    request.headers = {k: v for k, v in headers.items() if k.lower() in signed}
    canonical = auth.canonical_request(request)
    return auth.signature(auth.string_to_sign(request, canonical), request)


@pytest.mark.parametrize(
    ("method", "url", "headers", "body"),
    [
        ("GET", "https://bucket.s3.eu-west-1.amazonaws.com/docs/a%20b.txt", {}, b""),
        ("GET", "https://127.0.0.1:9000/bkt/k?tagging", {"Accept": "*/*"}, b""),
        (
            "PUT",
            "https://s3.eu-west-1.amazonaws.com/bkt/notes/%C3%A9t%C3%A9.txt",
            {"Content-Type": "text/plain", "x-amz-meta-owner": " Ada  L ", "Cache-Control": "no"},
            b"summer",
        ),
        ("POST", "https://127.0.0.1:9000/bkt?delete", {"Content-Type": "application/xml"}, b"<D/>"),
        ("DELETE", "https://127.0.0.1:9000/bkt/k?versionId=a%2Bb&x-id=DeleteObject", {}, b""),
    ],
)
def test_signature_matches_botocore(
    method: str, url: str, headers: dict[str, str], body: bytes
) -> None:
    out_url, out = sign_v4(KEY, method, url, headers, body, NOW)
    ours = out["Authorization"].rsplit("Signature=", 1)[1]
    assert ours == botocore_signature(KEY, method, out_url, out, body)
    assert out["X-Amz-Date"] == "20260517T123005Z"


def test_another_service_signs_the_path_encoded_again() -> None:
    key = AwsKey("AKIDEXAMPLE", "secret", "us-east-1", "dynamodb")
    out_url, out = sign_v4(
        key, "POST", "https://dynamodb.us-east-1.amazonaws.com/a%20b", {}, b"{}", NOW
    )
    assert out["Authorization"].rsplit("Signature=", 1)[1] == botocore_signature(
        key, "POST", out_url, out, b"{}"
    )


def test_the_agents_signature_and_presigned_query_are_replaced() -> None:
    agent = {
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKIAAGENT/20260101/us-east-1/s3/aws4_request,"
        " "
        "SignedHeaders=host, Signature=abc",
        "X-Amz-Date": "20260101T000000Z",
        "x-amz-security-token": "agent-session",
        "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
    }
    url = "https://127.0.0.1:9000/bkt/k?X-Amz-Signature=zzz&X-Amz-Credential=a&partNumber=2"
    out_url, out = sign_v4(KEY, "GET", url, agent, None, NOW)
    assert out_url == "https://127.0.0.1:9000/bkt/k?partNumber=2"
    assert "AKIDEXAMPLE/20260517/eu-west-1/s3/aws4_request" in out["Authorization"]
    assert "x-amz-security-token" not in {k.lower() for k in out}
    assert out["Host"] == "127.0.0.1:9000"


def test_signers_pick_the_entry_by_host_and_port() -> None:
    entries = Signers(
        (
            SigningEntry(HostPattern.parse("127.0.0.1:9000"), KEY),
            SigningEntry(HostPattern.parse("*.amazonaws.com"), KEY),
        )
    )
    assert entries.for_url("https://127.0.0.1:9000/x") is entries.entries[0]
    assert entries.for_url("https://127.0.0.1:9001/x") is None
    assert entries.for_url("https://s3.us-east-1.amazonaws.com/x") is entries.entries[1]
    url, headers = entries.sign("GET", "https://example.com/x?b=1&a=2", {"A": "1"}, None)
    assert (url, headers) == ("https://example.com/x?b=1&a=2", {"A": "1"})


def test_the_secret_never_shows_in_repr() -> None:
    entry = SigningEntry(
        HostPattern.parse("h"), AwsKey("AKID", "s3cr3t-VALUE", "r", "s3", "tok-VALUE")
    )
    assert "s3cr3t-VALUE" not in repr(entry) and "tok-VALUE" not in repr(entry)


def test_agent_scope() -> None:
    value = "AWS4-HMAC-SHA256 Credential=AK/20260101/eu-central-1/s3/aws4_request, Signed"
    assert agent_scope([("authorization", value)]) == ("eu-central-1", "s3")
    assert agent_scope([("authorization", "Bearer x")]) is None


def test_config_signing_errors_carry_file_and_line_and_never_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UNSET_SECRET_FOR_TEST", raising=False)
    path = tmp_path / "config.yaml"
    path.write_text(
        "signing:\n"
        "  - host: 127.0.0.1:9000\n"
        "    aws:\n"
        "      access_key_id: AKIDEXAMPLE\n"
        "      secret_access_key: ${UNSET_SECRET_FOR_TEST}\n"
        "      region: us-east-1\n"
        "      colour: blue\n"
        "  - host: https://s3.amazonaws.com/\n"
        "    aws: {access_key_id: AK, secret_access_key: 12345, region: r}\n"
        "  - {aws: {}}\n"
    )
    with pytest.raises(ConfigErrors) as caught:
        load_config(path)
    text = str(caught.value)
    assert f"{path}:5: signing: aws.secret_access_key is missing or empty" in text
    assert f"{path}:7: signing: unknown key aws.colour" in text
    assert f"{path}:8: signing: host is a host name" in text
    assert "aws.secret_access_key must be a string, got a non-string value" in text
    assert "12345" not in text
    assert f"{path}:10: signing: host is required" in text


def test_config_signing_loads_and_hides_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_S3_SECRET", "very-SECRET-value-42")
    path = tmp_path / "config.yaml"
    path.write_text(
        "signing:\n"
        "  - host: s3.*.amazonaws.com\n"
        "    aws: {access_key_id: AKID, secret_access_key: '${TEST_S3_SECRET}',"
        " region: eu-west-1}\n"
    )
    config = load_config(path)
    entry = config.signing.for_url("https://s3.eu-west-1.amazonaws.com/bkt/k")
    assert entry is not None and entry.aws.service == "s3"
    assert entry.aws.secret_access_key == "very-SECRET-value-42"
    assert "very-SECRET-value-42" not in repr(config) + entry.describe()


@pytest.mark.parametrize(
    ("url", "headers", "scope"),
    [
        # An entry that names no region or service signs in the scope of the agent's own
        # signature, else the one its host names, else us-east-1/s3.
        (
            "https://127.0.0.1:9000/",
            {"Authorization": "AWS4-HMAC-SHA256 Credential=P/20260101/eu-west-2/dynamodb/x"},
            "eu-west-2/dynamodb",
        ),
        ("https://dynamodb.ap-south-1.amazonaws.com/", {}, "ap-south-1/dynamodb"),
        ("https://bkt.s3.eu-north-1.amazonaws.com/k", {}, "eu-north-1/s3"),
        ("https://127.0.0.1:9000/", {}, "us-east-1/s3"),
    ],
)
def test_an_entry_without_region_or_service_takes_the_requests(
    url: str, headers: dict[str, str], scope: str
) -> None:
    entry = SigningEntry(HostPattern.parse("*"), AwsKey("AKID", "secret-value", "", ""))
    _, out = Signers((entry,)).sign("POST", url, headers, b"{}", NOW)
    assert f"Credential=AKID/20260517/{scope}/aws4_request" in out["Authorization"]


@pytest.mark.parametrize(
    ("payload", "kept"),
    [
        ("UNSIGNED-PAYLOAD", True),
        ("STREAMING-UNSIGNED-PAYLOAD-TRAILER", True),  # aws-chunked with unsigned chunks
        ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", False),
    ],
)
def test_an_unsigned_payload_stays_unsigned(payload: str, kept: bool) -> None:
    _, out = Signers((SigningEntry(HostPattern.parse("h"), KEY),)).sign(
        "PUT", "https://h/b/k", {"X-Amz-Content-Sha256": payload}, b"body", NOW
    )
    hashed = "230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5"  # sha256("body")
    assert out["X-Amz-Content-Sha256"] == (payload if kept else hashed)


def test_an_entry_scoped_to_sessions_serves_only_them() -> None:
    entry = SigningEntry(HostPattern.parse("h"), KEY, sessions=("ci-*",))
    signers = Signers((entry,))
    assert signers.for_url("https://h/x", "ci-7") is entry
    assert signers.for_url("https://h/x", "prod") is None
    assert signers.for_url("https://h/x") is None  # a request of no session in particular
