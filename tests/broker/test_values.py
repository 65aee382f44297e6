"""Where a secret's value comes from: `${NAME}` and `${file:PATH}`, read at start and reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.broker.values import MAX_FILE, MIN_SECRET, Unavailable, ValueTemplate

ENV = {"KEY": "sk-live-1234567890", "SHORT": "x" * (MIN_SECRET - 1), "EXACT": "y" * MIN_SECRET}


@pytest.mark.parametrize(
    ("text", "expected", "pieces"),
    [
        ("${KEY}", "sk-live-1234567890", ("sk-live-1234567890",)),
        ("Bearer ${KEY}", "Bearer sk-live-1234567890", ("sk-live-1234567890",)),
        ("${EXACT}", "y" * MIN_SECRET, ("y" * MIN_SECRET,)),  # at the limit
        ("${KEY}:${EXACT}", f"sk-live-1234567890:{'y' * MIN_SECRET}", (ENV["KEY"], ENV["EXACT"])),
    ],
)
def test_values_are_read_from_the_environment(
    text: str, expected: str, pieces: tuple[str, ...]
) -> None:
    got = ValueTemplate.parse(text, Path(".")).read(ENV)
    assert (got.text, got.pieces) == (expected, pieces)
    assert "sk-live" not in repr(got)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${UNSET}", "the environment variable UNSET is not set or empty"),
        ("${SHORT}", f"holds {MIN_SECRET - 1} characters: a secret needs at least {MIN_SECRET}"),
        ("Bearer ${file:missing.txt}", "does not exist"),
    ],
)
def test_what_cannot_be_read_is_named_never_shown(text: str, message: str) -> None:
    with pytest.raises(Unavailable, match=message) as caught:
        ValueTemplate.parse(text, Path("/nonexistent-dir")).read(ENV)
    assert "x" * (MIN_SECRET - 1) not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "literal_ok", "message"),
    [
        ("sk-written-into-the-config", False, "never be written into config.yaml"),
        ("${lower_case}", False, "is not a reference"),
        ("${KEY", False, "is not a reference"),
        ("${file:}", False, "is not a reference"),
        ("Bearer\n${KEY}", False, "line break"),
    ],
)
def test_bad_templates(text: str, literal_ok: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ValueTemplate.parse(text, Path("."), literal_ok=literal_ok)


def test_an_access_key_id_may_be_written_as_is() -> None:
    got = ValueTemplate.parse("AKIAEXAMPLE", Path("."), literal_ok=True).read({})
    assert (got.text, got.pieces) == ("AKIAEXAMPLE", ())


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"ghp_abcdefghij\n", "ghp_abcdefghij"),  # one trailing newline dropped
        (b"ghp_abcdefghij\r\n", "ghp_abcdefghij"),
        (b"ghp_abcdefghij", "ghp_abcdefghij"),
        (b"a" * MAX_FILE, "a" * MAX_FILE),  # at the limit
    ],
)
def test_values_are_read_from_files(tmp_path: Path, content: bytes, expected: str) -> None:
    (tmp_path / "token").write_bytes(content)
    template = ValueTemplate.parse("${file:token}", tmp_path)  # relative to the config's dir
    assert template.read({}).text == expected
    assert template.sources == (f"file {tmp_path / 'token'}",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a" * (MAX_FILE + 1), f"larger than {MAX_FILE} bytes"),  # one past the limit
        (b"two\nlines-of-secret", "line break"),
        (b"\xff\xfe-not-utf8-at-all", "not UTF-8"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "token").write_bytes(content)
    with pytest.raises(Unavailable, match=message):
        ValueTemplate.parse("${file:token}", tmp_path).read({})


def test_a_file_is_read_again_each_time(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-secret-value\n")
    template = ValueTemplate.parse(f"${{file:{path}}}", Path("/elsewhere"))
    assert template.read({}).text == "first-secret-value"
    path.write_text("rotated-secret-value\n")
    assert template.read({}).text == "rotated-secret-value"
