"""The vendors' own SDKs, holding only placeholders, through a real `undoproxy run`.

Each agent is a Python process started by `undoproxy exec` with nothing but the environment
it prints (the shell that starts it even holds the real keys: `env` replaces them with
placeholders). Its SDK reads its key from the environment as it always does: the OpenAI SDK
(`OPENAI_API_KEY`) against a fake that accepts only the real key, PyGithub (`GITHUB_TOKEN`)
against the fake GitHub that accepts only the real token, and boto3 (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`) against moto's server, which checks every SigV4 signature against
the real key: S3 and DynamoDB (an AWS JSON service). The upstreams listen on 127.0.0.2
(loopback, not in the NO_PROXY `env` prints). Then each session is rolled back, with no
`signing:` block: undoproxy's own snapshots, undos and read-backs use the same secrets. The
real values appear in no output, no log and not in the database file.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fake_github
from tests.support.certs import server_context
from tests.support.ci import skip_or_fail
from tests.support.fake_github import GitHubState
from tests.support.fake_openai import OpenAIState, create_app
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

try:
    from tests.support.s3 import MotoS3, bucket_state
except ImportError:  # pragma: no cover
    skip_or_fail("moto[server] is not installed (pip install -e '.[test]')", module=True)

ADDRESS = "127.0.0.2"
TAG = uuid.uuid4().hex[:8]
OPENAI_REAL = f"sk-proj-REAL{TAG}openai"
GITHUB_REAL = f"ghp_REAL{TAG}github"


@pytest.fixture(scope="module")
def moto(upstream_cert: tuple[Path, Path]) -> Iterator[MotoS3]:
    server = MotoS3(upstream_cert, host=ADDRESS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def openai_state() -> OpenAIState:
    return OpenAIState(key=OPENAI_REAL)


@pytest.fixture(scope="module")
def openai_api(
    openai_state: OpenAIState, upstream_cert: tuple[Path, Path]
) -> Iterator[ThreadedServer]:
    server = ThreadedServer(
        create_app(openai_state), server_context(upstream_cert), host=ADDRESS
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def github_state() -> GitHubState:
    return GitHubState(token=GITHUB_REAL)


@pytest.fixture(scope="module")
def github(github_state: GitHubState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = ThreadedServer(
        fake_github.create_app(github_state), server_context(upstream_cert), host=ADDRESS
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(
    tmp_path_factory: pytest.TempPathFactory,
    moto: MotoS3,
    openai_api: ThreadedServer,
    github: ThreadedServer,
) -> Iterator[Undoproxy]:
    directory = tmp_path_factory.mktemp("sdks")
    (directory / "github-token").write_text(GITHUB_REAL + "\n")
    config = {
        "packs": [
            {"name": "github", "hosts": [f"{ADDRESS}:{github.port}"]},
            # DynamoDB's JSON calls (POST / with X-Amz-Target) first: they are not S3's
            {"name": "dynamodb", "hosts": [moto.host]},
            {"name": "s3", "hosts": [moto.host]},
        ],
        "rules": [
            {
                "name": "chat",  # as the llm pack says of api.openai.com
                "match": {"host": f"{ADDRESS}:{openai_api.port}", "path": "/v1/chat/completions"},
                "kind": "read",
            },
        ],
        "secrets": [
            {
                "name": "openai",
                "host": f"{ADDRESS}:{openai_api.port}",
                "header": "Authorization",
                "value": "Bearer ${OPENAI_API_KEY}",
            },
            {
                "name": "github",
                "host": f"{ADDRESS}:{github.port}",
                "header": "Authorization",
                "value": "token ${file:github-token}",
                "env": "GITHUB_TOKEN",
            },
            {
                "name": "aws",
                "host": moto.host,
                "aws": {
                    "access_key_id": "${TEST_AWS_KEY_ID}",
                    "secret_access_key": "${TEST_AWS_SECRET}",
                },
            },
        ],
    }
    env = {
        "OPENAI_API_KEY": OPENAI_REAL,
        "TEST_AWS_KEY_ID": moto.access_key_id,
        "TEST_AWS_SECRET": moto.secret_access_key,
    }
    instance = Undoproxy(directory, config, env=env).start()
    yield instance
    instance.stop()


def reals(moto: MotoS3) -> dict[str, str]:
    return {
        "OpenAI key": OPENAI_REAL,
        "GitHub token": GITHUB_REAL,
        "AWS access key id": moto.access_key_id,
        "AWS secret access key": moto.secret_access_key,
    }


def _agent(up: Undoproxy, moto: MotoS3, session: str, code: str, **env: str) -> str:
    """Run `code` as an agent under `undoproxy exec`; its output (it must exit 0)."""
    shell = {
        **up.cli_env(),
        # What the user's shell holds: exec gives the agent placeholders instead.
        "OPENAI_API_KEY": OPENAI_REAL,
        "AWS_ACCESS_KEY_ID": moto.access_key_id,
        "AWS_SECRET_ACCESS_KEY": moto.secret_access_key,
        **env,
    }
    prelude = textwrap.dedent(
        """\
        import os
        for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"):
            assert "placeholder" in os.environ[name], name
        """
    )
    done = up.cli(
        "exec", "--session", session, "--", sys.executable, "-c", prelude + textwrap.dedent(code),
        env=shell, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for what, real in reals(moto).items():
        assert real not in output, what
    return output


def _rolled_back(up: Undoproxy, session: str, count: int) -> dict[str, Any]:
    report = up.rollback(session)
    assert report["state"] == "rolled_back", json.dumps(report, indent=1)
    assert [s["status"] for s in report["steps"]] == ["compensated"] * count
    return report


def test_openai_sdk(
    up: Undoproxy, moto: MotoS3, openai_api: ThreadedServer, openai_state: OpenAIState
) -> None:
    session = f"openai-{TAG}"
    out = _agent(
        up,
        moto,
        session,
        """
        import openai
        client = openai.OpenAI(max_retries=0)
        answer = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        print("said:", answer.choices[0].message.content)
        print("file:", client.files.create(file=("notes.txt", b"hello"), purpose="assistants").id)
        """,
        OPENAI_BASE_URL=f"https://{ADDRESS}:{openai_api.port}/v1",
    )
    assert "said: Hello from the fake" in out and "file: file-" in out
    assert openai_state.files
    assert {auth for _, _, auth in openai_state.log} == {f"Bearer {OPENAI_REAL}"}
    _rolled_back(up, session, 1)  # the upload is deleted, with the real key
    assert openai_state.files == {}
    assert {auth for _, _, auth in openai_state.log} == {f"Bearer {OPENAI_REAL}"}


def test_pygithub(
    up: Undoproxy, moto: MotoS3, github: ThreadedServer, github_state: GitHubState
) -> None:
    session = f"github-{TAG}"
    repo = github_state.repo(github_state.login, f"repo-{TAG}")
    repo.files["README.md"] = b"# hello\n"
    repo.issues[1] = {
        **{"number": 1, "id": 1, "title": "existing", "body": None, "state": "open"},
        **{"state_reason": None, "labels": [], "assignees": [], "milestone": None},
    }
    before = github_state.dump()
    _agent(
        up,
        moto,
        session,
        f"""
        from github import Auth, Github
        g = Github(
            auth=Auth.Token(os.environ["GITHUB_TOKEN"]),
            base_url="https://{ADDRESS}:{github.port}{fake_github.PREFIX}",
            retry=None,
        )
        repo = g.get_repo("{github_state.login}/repo-{TAG}")
        repo.get_issue(1).create_comment("a comment by the agent")
        repo.create_label("agent-label", "ff0000")
        print("done")
        """,
    )
    assert github_state.dump() != before
    _rolled_back(up, session, 2)
    assert github_state.dump() == before


def test_boto3_s3_and_dynamodb(up: Undoproxy, moto: MotoS3) -> None:
    session = f"aws-{TAG}"
    bucket = f"bkt-{TAG}"
    s3 = moto.direct()
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="docs/a.txt", Body=b"first draft\n", Metadata={"o": "ada"})
    ddb = moto._client("dynamodb", moto.access_key_id, moto.secret_access_key)
    table = f"notes-{TAG}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    before = bucket_state(s3, bucket)
    out = _agent(
        up,
        moto,
        session,
        f"""
        import boto3
        s3 = boto3.client("s3")
        s3.put_object(Bucket="{bucket}", Key="docs/a.txt", Body=b"rewritten by the agent")
        s3.put_object(Bucket="{bucket}", Key="docs/new.txt", Body=b"made by the agent")
        s3.delete_object(Bucket="{bucket}", Key="docs/a.txt")
        ddb = boto3.client("dynamodb")
        ddb.put_item(TableName="{table}", Item={{"id": {{"S": "n1"}}, "text": {{"S": "hi"}}}})
        got = ddb.get_item(TableName="{table}", Key={{"id": {{"S": "n1"}}}})
        print("item:", got["Item"]["text"]["S"])
        """,
        AWS_ENDPOINT_URL=moto.base_url,
        AWS_DEFAULT_REGION="us-east-1",
    )
    assert "item: hi" in out
    assert bucket_state(s3, bucket) != before
    assert "Item" in ddb.get_item(TableName=table, Key={"id": {"S": "n1"}})
    report = up.rollback(session)
    assert bucket_state(s3, bucket) == before  # S3, byte for byte, with no signing: block
    s3_steps = [s["status"] for s in report["steps"] if s["url"].endswith(".txt")]
    assert s3_steps == ["compensated"] * 3, report
    # DynamoDB (the dynamodb pack): GetItem before the PutItem, DeleteItem to undo it and a
    # GetItem read-back, each signed by undoproxy with the real key (moto checks them all).
    assert "Item" not in ddb.get_item(TableName=table, Key={"id": {"S": "n1"}})
    (put_item,) = [s for s in report["steps"] if s["url"].endswith("/")]
    assert put_item["status"] == "compensated", put_item
    assert report["state"] == "rolled_back", report
    _no_secret_in_outputs(up, moto, session)


def _no_secret_in_outputs(up: Undoproxy, moto: MotoS3, session: str) -> None:
    texts = {
        "session (API)": up.api("GET", f"/api/sessions/{session}").text,
        "export har": up.api("GET", f"/api/sessions/{session}/export?format=har").text,
        "secrets (API)": up.api("GET", "/api/secrets").text,
        "metrics": up.api("GET", "/metrics").text,
        "show": up.cli("show", session).stdout,
        "log": "".join(up.output),
    }
    leaks = [f"{w} in {t}" for w, r in reals(moto).items() for t, x in texts.items() if r in x]
    assert leaks == []


def test_the_real_values_are_nowhere_in_the_database(up: Undoproxy, moto: MotoS3) -> None:
    """Last: stops undoproxy (the journal flushed) and reads its database file byte by byte."""
    assert up.stop() == 0
    database = b"".join(p.read_bytes() for p in sorted(up.dir.glob("journal.db*")))
    assert f"bkt-{TAG}".encode() in database  # the traffic is there; only the secrets are not
    leaks = [what for what, real in reals(moto).items() if real.encode() in database]
    assert leaks == []
    for what, real in reals(moto).items():
        assert real not in "".join(up.output), what
