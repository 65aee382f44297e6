"""Rollback of S3 writes made by boto3 through undoproxy, against a real S3-compatible server
(moto's server, from PyPI) that checks every SigV4 signature.

The agent's requests are signed with its key; undoproxy cannot replay them, so it signs its
own snapshots, undo requests and read-backs with the key `signing:` gives it (another IAM user).
Each test reads the bucket directly (not through the proxy) before and after, and compares
bodies, headers, user metadata and tags byte for byte.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.exceptions import ClientError

from tests.rollback.helpers import details, rollback_ends, statuses
from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy

try:
    from tests.support.s3 import MotoS3, bucket_state, object_state
except ImportError:  # pragma: no cover
    skip_or_fail("moto[server] is not installed (pip install -e '.[test]')", module=True)

KEY_ENV, SECRET_ENV = "UNDOPROXY_TEST_S3_KEY_ID", "UNDOPROXY_TEST_S3_SECRET"


@pytest.fixture(scope="module")
def moto(upstream_cert: tuple[Path, Path]) -> Iterator[MotoS3]:
    server = MotoS3(upstream_cert).start()
    yield server
    server.stop()


def _proxy(
    directory: Path,
    moto: MotoS3,
    *,
    signing: bool,
    secret: str = "",
    rules: list[dict[str, Any]] | None = None,
) -> Undoproxy:
    config: dict[str, Any] = {"packs": [{"name": "s3", "hosts": [moto.host]}]}
    if rules:
        config["rules"] = rules
    if signing:
        config["signing"] = [
            {
                "host": moto.host,
                "aws": {
                    "access_key_id": f"${{{KEY_ENV}}}",
                    "secret_access_key": f"${{{SECRET_ENV}}}",
                    "region": "us-east-1",
                    "service": "s3",
                },
            }
        ]
    env = {KEY_ENV: moto.undo_key_id, SECRET_ENV: secret or moto.undo_secret}
    return Undoproxy(directory, config, env=env).start()


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, moto: MotoS3) -> Iterator[Undoproxy]:
    """undoproxy with a signing key for the S3 host."""
    up = _proxy(tmp_path_factory.mktemp("s3-signed"), moto, signing=True)
    yield up
    up.stop()


@pytest.fixture
def bucket(moto: MotoS3, session_id: str) -> str:
    """A bucket of its own for each test, with two objects that have everything: metadata,
    Cache-Control, Content-Disposition, Content-Language and tags."""
    name = f"bkt-{session_id.lower()}"
    s3 = moto.direct()
    s3.create_bucket(Bucket=name)
    for key, body in (("docs/a.txt", b"first draft\n"), ("docs/b.json", b'{"n": 1}')):
        s3.put_object(
            Bucket=name,
            Key=key,
            Body=body,
            ContentType="text/plain; charset=utf-8" if key.endswith("txt") else "application/json",
            CacheControl="max-age=60",
            ContentDisposition=f'attachment; filename="{key.rsplit("/", 1)[1]}"',
            ContentLanguage="en-GB",
            Metadata={"owner": "ada", "reviewed": "yes"},
            Tagging="team=blue&stage=draft",
        )
    return name


def agent(moto: MotoS3, up: Undoproxy, session: str) -> Any:
    return moto.through(up.proxy_url(session), up.ca_bundle)


@pytest.fixture
def s3(moto: MotoS3) -> Any:
    """The bucket owner's client, straight to the server (never through undoproxy)."""
    return moto.direct()


@pytest.fixture
def s3a(moto: MotoS3, signed: Undoproxy, session_id: str) -> Any:
    """The agent's client, through the undoproxy that signs, in the test's session."""
    return agent(moto, signed, session_id)


def test_the_server_refuses_a_signature_replayed_on_another_request(
    moto: MotoS3, s3: Any, bucket: str
) -> None:
    """The premise of everything below: a signature cannot be reused (moto checks it)."""
    sent: dict[str, str] = {}
    s3.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: sent.update(request.headers.items())
    )
    s3.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"signed once")
    # What a replay of the signature would send: the signature headers, not the PUT's body.
    headers = {
        k: v.decode() if isinstance(v, bytes) else v
        for k, v in sent.items()
        if k.lower() in ("authorization", "x-amz-date", "x-amz-content-sha256")
    }
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256")
    url = f"{moto.base_url}/{bucket}/docs/a.txt"
    for method in ("GET", "DELETE"):
        r = requests.request(method, url, headers=headers, verify=str(moto.cert[0]), timeout=30)
        assert r.status_code == 403 and "SignatureDoesNotMatch" in r.text, (method, r.text)
    bad = moto._client("s3", moto.access_key_id, "not-the-secret")
    with pytest.raises(bad.exceptions.ClientError, match="SignatureDoesNotMatch"):
        bad.get_object(Bucket=bucket, Key="docs/a.txt")


def test_put_object_overwriting_and_creating_is_undone_byte_for_byte(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    before = bucket_state(s3, bucket)
    s3a.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"rewritten by the agent", Metadata={})
    s3a.put_object(
        Bucket=bucket,
        Key="docs/a.txt",
        Body=b"and again",
        ContentType="text/markdown",
        Metadata={"owner": "agent"},
        Tagging="team=red",
    )
    s3a.put_object(Bucket=bucket, Key="docs/new.txt", Body=b"made by the agent")
    assert bucket_state(s3, bucket) != before

    plan = signed.rollback(session_id, dry_run=True)
    assert statuses(plan) == ["planned"] * 3
    report = rollback_ends(signed, session_id, "rolled_back", ["compensated"] * 3)
    assert "read back: 1 target as before" in details(report)[0]
    assert "read back: 2 targets as before" in details(report)[1]
    assert bucket_state(s3, bucket) == before


def test_a_deleted_object_comes_back_with_its_metadata_and_tags(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    before = object_state(s3, bucket, "docs/b.json")
    assert before is not None and before["Metadata"] == {"owner": "ada", "reviewed": "yes"}
    s3a.delete_object(Bucket=bucket, Key="docs/b.json")
    assert object_state(s3, bucket, "docs/b.json") is None
    rollback_ends(signed, session_id, "rolled_back", ["compensated"])
    assert object_state(s3, bucket, "docs/b.json") == before


def test_object_tags_are_put_back(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    before = bucket_state(s3, bucket)
    s3a.put_object_tagging(
        Bucket=bucket, Key="docs/a.txt", Tagging={"TagSet": [{"Key": "stage", "Value": "final"}]}
    )
    s3a.delete_object_tagging(Bucket=bucket, Key="docs/b.json")
    assert object_state(s3, bucket, "docs/b.json")["Tags"] == []  # type: ignore[index]
    rollback_ends(signed, session_id, "rolled_back", ["compensated"] * 2)
    assert bucket_state(s3, bucket) == before


def test_copy_object_over_a_key_and_to_a_new_key_is_undone(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    before = bucket_state(s3, bucket)
    source = {"Bucket": bucket, "Key": "docs/b.json"}
    s3a.copy_object(Bucket=bucket, Key="docs/a.txt", CopySource=source)
    s3a.copy_object(Bucket=bucket, Key="docs/c.json", CopySource=source)
    assert object_state(s3, bucket, "docs/a.txt")["body"] == b'{"n": 1}'  # type: ignore[index]
    rollback_ends(signed, session_id, "rolled_back", ["compensated"] * 2)
    assert bucket_state(s3, bucket) == before


def test_delete_objects_gets_one_inverse_per_key(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    before = bucket_state(s3, bucket)
    objects = [{"Key": "docs/a.txt"}, {"Key": "docs/b.json"}, {"Key": "docs/never-there.txt"}]
    answer = s3a.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    assert len(answer["Deleted"]) == 3
    assert bucket_state(s3, bucket) == {}
    report = rollback_ends(signed, session_id, "rolled_back", ["compensated"])
    assert "then 1 more like it" in details(report)[0]
    assert "4 targets as before" in details(report)[0]
    assert bucket_state(s3, bucket) == before


def test_a_change_made_by_someone_else_since_is_not_overwritten(
    s3: Any, s3a: Any, signed: Undoproxy, bucket: str, session_id: str
) -> None:
    s3a.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"agent")
    s3.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"a person's later edit")
    report = signed.rollback(session_id)
    assert statuses(report) == ["conflict"], report
    assert object_state(s3, bucket, "docs/a.txt")["body"] == b"a person's later edit"  # type: ignore[index]


def test_without_signing_the_write_goes_through_and_rollback_says_irreversible(
    tmp_path: Path, moto: MotoS3, s3: Any, bucket: str, session_id: str
) -> None:
    up = _proxy(tmp_path / "unsigned", moto, signing=False)
    try:
        agent(moto, up, session_id).put_object(Bucket=bucket, Key="docs/a.txt", Body=b"agent")
        after = object_state(s3, bucket, "docs/a.txt")
        report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    finally:
        up.stop()
    detail = details(report)[0]
    assert "signed (AWS Signature Version 4)" in detail
    assert f"signing: [{{host: {moto.host}, aws: {{access_key_id:" in detail
    assert "region: us-east-1, service: s3" in detail
    assert object_state(s3, bucket, "docs/a.txt") == after  # nothing was sent


def test_a_wrong_signing_key_blocks_the_write_saying_which_key(
    tmp_path: Path, moto: MotoS3, s3: Any, bucket: str, session_id: str
) -> None:
    # undoproxy's own signed read before the PUT fails: the write would be irreversible, and
    # nothing says that is acceptable. Fail closed: refused, with the entry to fix.
    up = _proxy(tmp_path / "wrong-key", moto, signing=True, secret="not-the-secret")
    before = object_state(s3, bucket, "docs/a.txt")
    try:
        with pytest.raises(ClientError) as refused:
            agent(moto, up, session_id).put_object(Bucket=bucket, Key="docs/a.txt", Body=b"x")
    finally:
        up.stop()
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert object_state(s3, bucket, "docs/a.txt") == before  # nothing was forwarded


def test_a_rule_may_let_a_write_go_on_when_its_signed_snapshot_fails(
    tmp_path: Path, moto: MotoS3, s3: Any, bucket: str, session_id: str
) -> None:
    up = _proxy(
        tmp_path / "proceed",
        moto,
        signing=True,
        secret="not-the-secret",
        rules=[
            {
                "name": "s3-put-anyway",
                "match": {"host": moto.host, "method": "PUT", "path": "/**"},
                "compensate": "s3.object",
                "on_snapshot_error": "proceed",
            }
        ],
    )
    try:
        agent(moto, up, session_id).put_object(Bucket=bucket, Key="docs/a.txt", Body=b"agent")
        report = up.rollback(session_id)
    finally:
        up.stop()
    assert object_state(s3, bucket, "docs/a.txt")["body"] == b"agent"  # type: ignore[index]
    assert statuses(report) == ["irreversible"]
    assert "signed by undoproxy with the signing entry" in details(report)[0]
    assert "HTTP 403" in details(report)[0]


def test_the_signing_secret_is_nowhere(
    tmp_path: Path, moto: MotoS3, bucket: str, session_id: str
) -> None:
    up = _proxy(tmp_path / "secret", moto, signing=True)
    outputs: dict[str, str] = {}
    try:
        s3a = agent(moto, up, session_id)
        s3a.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"agent", Metadata={"k": "v"})
        s3a.delete_object(Bucket=bucket, Key="docs/b.json")
        report = up.rollback(session_id)
        assert report["state"] == "rolled_back", report
        outputs["report"] = str(report)
        outputs["session"] = up.api("GET", f"/api/sessions/{session_id}").text
        for fmt in ("jsonl", "har"):
            exported = up.api("GET", f"/api/sessions/{session_id}/export?format={fmt}")
            assert exported.status_code == 200
            outputs[f"export {fmt}"] = exported.text
        for args in (("show", session_id, "--json"), ("export", session_id, "--format", "har")):
            run = up.cli(*args)
            outputs[" ".join(args)] = run.stdout + run.stderr
    finally:
        assert up.stop() == 0
    outputs["undoproxy's output"] = "".join(up.output)
    outputs["config.yaml"] = up.config_path.read_text()
    database = b"".join(p.read_bytes() for p in sorted(up.dir.glob("journal.db*")))
    with sqlite3.connect(up.dir / "journal.db") as db:  # the rows, whatever the encoding
        outputs["journal rows"] = repr(db.execute("SELECT * FROM steps").fetchall())
    assert "docs/a.txt" in outputs["export har"]
    secret = moto.undo_secret
    assert [where for where, text in outputs.items() if secret in text] == []
    assert secret.encode() not in database
