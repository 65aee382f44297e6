"""`secrets:` in config.yaml: what it becomes, and every mistake reported with file:line
(never with a value)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from undoproxy.broker.entries import AWS_PLACEHOLDER_KEY_ID
from undoproxy.config import Config, load_config
from undoproxy.errors import ConfigErrors

REAL = "sk-real-value-for-parse-tests"


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", REAL)
    monkeypatch.setenv("AWS_KEY_FOR_TEST", "AKIAREALKEYFORTESTS1")
    monkeypatch.setenv("AWS_SECRET_FOR_TEST", "real/aws+secret/for-tests")
    monkeypatch.delenv("UNSET_FOR_TEST", raising=False)


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path)


def test_entries_as_written(tmp_path: Path) -> None:
    (tmp_path / "gh-token").write_text("ghp_realtokenvalue\n")
    config = _load(
        tmp_path,
        "secrets:\n"
        "  - host: api.openai.com\n"
        "    header: Authorization\n"
        '    value: "Bearer ${OPENAI_API_KEY}"\n'
        "  - name: gh\n"
        "    host: [api.github.com, uploads.github.com]\n"
        "    header: Authorization\n"
        "    value: token ${file:gh-token}\n"
        "    env: GITHUB_TOKEN\n"
        "    placeholder: ghp_undoproxy_placeholder\n"
        "    sessions: [research-*, ci]\n"
        "  - name: aws\n"
        '    host: "*.amazonaws.com"\n'
        "    aws: {access_key_id: '${AWS_KEY_FOR_TEST}', "
        "secret_access_key: '${AWS_SECRET_FOR_TEST}', region: eu-west-1}\n",
    )
    openai, gh, aws = config.secrets
    assert (openai.name, openai.env, openai.placeholder) == (
        "api.openai.com",
        "OPENAI_API_KEY",
        "undoproxy-placeholder-openai-api-key",
    )
    assert openai.value.text == "Bearer ${OPENAI_API_KEY}"  # as written: read by the broker
    assert [h.text for h in gh.hosts] == ["api.github.com", "uploads.github.com"]
    assert gh.sessions == ("research-*", "ci")
    assert gh.allows("research-7") and gh.allows("ci") and not gh.allows("prod")
    assert gh.variables() == (("GITHUB_TOKEN", "ghp_undoproxy_placeholder"),)
    assert aws.kind == "aws" and (aws.aws.region, aws.aws.service) == ("eu-west-1", "")
    assert dict(aws.variables())["AWS_ACCESS_KEY_ID"] == AWS_PLACEHOLDER_KEY_ID
    assert REAL not in repr(config)


@pytest.mark.parametrize(
    ("entry", "line", "message"),
    [
        (
            "  - host: api.openai.com\n    header: Authorization\n    value: Bearer sk-in-config\n",
            4,
            "secrets: value must come from the environment or a file",
        ),
        (
            "  - host: api.openai.com\n    header: Authorization\n    value: ${UNSET_FOR_TEST}\n",
            2,
            "secrets: api.openai.com: the environment variable UNSET_FOR_TEST is not set",
        ),
        (
            "  - host: a.example\n    header: X-Key\n    value: ${file:nope}\n",
            2,
            "does not exist",
        ),
        ("  - header: X-Key\n    value: ${OPENAI_API_KEY}\n", 2, "host is required"),
        ("  - host: https://a.example/\n    aws: {}\n", 2, "not a URL"),
        (
            "  - host: a.example\n    header: Host\n    value: ${OPENAI_API_KEY}\n",
            3,
            "a secret cannot go in the Host header",
        ),
        ("  - host: a.example\n", 2, "either header and value, or aws"),
        (
            "  - host: a.example\n    header: X-Key\n    value: ${OPENAI_API_KEY}\n    colour: 1\n",
            5,
            "unknown key 'colour'",
        ),
        (
            "  - host: a.example\n    aws: {access_key_id: AK, secret_access_key: plain}\n",
            3,
            "aws.secret_access_key must come from the environment or a file",
        ),
        (
            "  - host: a.example\n    aws: {secret_access_key: '${OPENAI_API_KEY}'}\n",
            3,
            "aws.access_key_id is required",
        ),
        (
            "  - host: a.example\n    header: X-Key\n    value: ${OPENAI_API_KEY}\n"
            "    sessions: []\n",
            5,
            "sessions must be a session id or glob",
        ),
        (
            "  - {name: a, host: a.example, header: X-Key, value: '${OPENAI_API_KEY}'}\n"
            "  - {name: a, host: b.example, header: X-Key, value: '${OPENAI_API_KEY}'}\n",
            3,
            "the name 'a' is taken",
        ),
        (
            "  - {name: a, host: a.example, header: X, value: '${OPENAI_API_KEY}'}\n"
            "  - {name: b, host: b.example, header: X, value: '${OPENAI_API_KEY}', "
            "placeholder: other-placeholder}\n",
            3,
            "env OPENAI_API_KEY has another placeholder",
        ),
        ("  - just a string\n", 2, "each entry is a mapping"),
    ],
)
def test_mistakes_carry_file_and_line(tmp_path: Path, entry: str, line: int, message: str) -> None:
    with pytest.raises(ConfigErrors) as caught:
        _load(tmp_path, "secrets:\n" + entry)
    text = str(caught.value)
    assert f"config.yaml:{line}: " in text and message in text, text
    assert REAL not in text


def test_a_bad_entry_stops_run_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        "proxy: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\n"
        "secrets:\n  - host: api.openai.com\n    header: Authorization\n"
        "    value: Bearer ${UNSET_FOR_TEST}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "undoproxy", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"{path}:5: secrets: api.openai.com: the environment variable UNSET_FOR_TEST" in (
        done.stdout + done.stderr
    )
    assert not (tmp_path / "state" / "undoproxy.db").exists()  # nothing started
