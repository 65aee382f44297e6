"""`undoproxy packs [NAME]`: the built-in packs, and one pack's rules."""

from __future__ import annotations

from pathlib import Path

from tests.support.proc import run_cli
from undoproxy.packs import builtin_names


def test_undoproxy_packs_lists_the_packs_and_one_pack_s_rules(tmp_path: Path) -> None:
    listed = run_cli("packs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for name in builtin_names():
        assert any(line.startswith(name + " ") for line in listed.stdout.splitlines())
    email = run_cli("packs", "email", cwd=tmp_path)
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
    unknown = run_cli("packs", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown pack 'nope'" in unknown.stderr
