"""`undoproxy packs [NAME]`: the built-in packs, and one pack's rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from undoproxy.packs import builtin_names


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "undoproxy", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_undoproxy_packs_lists_the_packs_and_one_pack_s_rules(tmp_path: Path) -> None:
    listed = _cli("packs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for name in builtin_names():
        assert any(line.startswith(name + " ") for line in listed.stdout.splitlines())
    email = _cli("packs", "email", cwd=tmp_path)
    assert email.returncode == 0, email.stderr
    [row] = [line for line in email.stdout.splitlines() if line.startswith("email/sendgrid ")]
    assert row.split()[1:] == [
        "api.sendgrid.com",
        "POST",
        "/v3/mail/send",
        "mutation",
        "high",
        "hold",
        "none:",
        "irreversible",
    ]
    unknown = _cli("packs", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown pack 'nope'" in unknown.stderr
