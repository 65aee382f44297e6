"""Outside text the CLI prints cannot drive the terminal (a real `undoproxy run`).

An agent chooses its intents, a session's intent and what a rule file says; a person chooses
a denial's reason. Each carries a terminal escape here (erase the line, return over it, set
the window title, a C1 control, a bidi override, a fake line of undoproxy's own): `sessions`,
`show`, `approvals`, `rollback` and `resolve` must print them escaped, on their own line.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import unicodedata
import uuid
from collections.abc import Iterator

import pytest

from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.cli.output import shown, table

ERASE = "\x1b[2K\r"
EVIL = f"{ERASE}\x1b]0;owned\x07\x9b31m\u202eevil\n  [ok] #9 nothing to see"
# A header value cannot carry CR or LF (undoproxy refuses them): the rest of it can.
IN_HEADER = "\x1b[2K\x1b]0;owned\x07\x9b31m\u202eevil"
RULES = [
    {
        "name": f"hold{ERASE}-it",
        "match": {"method": "POST", "path": "/echo/held/**"},
        "action": "hold",
    },
    {
        "name": "gone-for-good",
        "match": {"method": "POST", "path": "/echo/irrev/**"},
        "compensate": "none",
        "reason": f"cannot be undone {EVIL}",
    },
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("cli-terminal"), {"rules": RULES}).start()
    yield instance
    instance.stop()


def _assert_inert(text: str) -> None:
    """No control or format character but the line breaks, and every line is one of ours."""
    unsafe = {c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")}
    assert not unsafe, f"raw control characters printed: {sorted(map(hex, map(ord, unsafe)))}"
    assert "\\x1b[2K\\r" in text
    assert not any(line.startswith("  [ok] #9") for line in text.splitlines())


def test_outside_text_is_printed_escaped(up: Undoproxy, plain_upstream: ThreadedServer) -> None:
    session = f"term-{uuid.uuid4().hex[:8]}"
    created = up.api("POST", "/api/sessions", json={"id": session, "intent": EVIL})
    assert created.status_code == 201, created.text
    base = plain_upstream.base_url
    with up.agent(session, headers={"X-Undoproxy-Intent": IN_HEADER.encode()}) as agent:  # type: ignore[dict-item]
        assert agent.post(f"{base}/echo/irrev/1", json={}, timeout=30).status_code == 200
        held = in_thread(lambda: agent.post(f"{base}/echo/held/1", json={}, timeout=30))
        approval = wait_pending(up, session)
        assert decide(up, approval["id"], "deny", reason=EVIL).status_code == 200
        assert held.result(30).status_code == 403

    outputs = {
        "sessions": up.cli("sessions"),
        "show": up.cli("show", session),
        "approvals": up.cli("approvals", "--state", "all"),
        "rollback": up.cli("rollback", session),
    }
    irreversible = next(s for s in up.steps(session) if s["rule"] == "gone-for-good")
    outputs["resolve"] = up.cli("resolve", irreversible["id"], "--reason", EVIL, "--by", EVIL)
    outputs["show-resolved"] = up.cli("show", session)
    for name, run in outputs.items():
        assert run.returncode in (0, 1), (name, run.stderr)
        _assert_inert(run.stdout + run.stderr)
    for name in ("sessions", "rollback"):
        assert "\\u202eevil" in outputs[name].stdout, name
    exported = _on_a_terminal(up, "export", session, "--format", "csv")
    assert "\x1b" not in exported and "\\x1b[2K" in exported
    error = up.cli("show", f"missing{ERASE}")
    assert error.returncode == 1
    assert "\x1b" not in error.stderr and "\r" not in error.stderr


def _on_a_terminal(up: Undoproxy, *args: str) -> str:
    """What `undoproxy ARGS` prints when its stdout is a terminal (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "undoproxy", *args], stdout=follower, env=up.cli_env()
    ) as proc:
        os.close(follower)  # read until the child's end closes
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal and it is drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.wait(60) == 0
    return b"".join(chunks).decode("utf-8")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text, ümlaut, 日本", "plain text, ümlaut, 日本"),
        ("\x1b[2K", "\\x1b[2K"),
        ("a\r\nb\tc\x00", "a\\r\\nb\\tc\\x00"),
        ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
        ("\u202ereversed\u2066\u200b\ufeff", "\\u202ereversed\\u2066\\u200b\\ufeff"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        ("\udcff", "\\udcff"),
        ("\U000e0041", "\\U000e0041"),
    ],
    ids=["printable", "csi", "c0", "del-c1", "bidi-zero-width", "separators", "surrogate", "tag"],
)
def test_shown_escapes_control_and_format_characters(text: str, expected: str) -> None:
    assert shown(text) == expected


def test_table_cells_stay_on_their_line() -> None:
    assert table([["a\nb", "\x1b"]], ["X", "Y"]) == "X     Y\na\\nb  \\x1b"
