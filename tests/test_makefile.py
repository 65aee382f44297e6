"""The Makefile: `make run` installs what running undoproxy needs, `make test` adds the test
extra on top, each behind its own stamp, and the suite runs on pytest-xdist. Read with
`make -n` (nothing is installed); tests/test_doc_examples.py says where the rest is measured."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _dry_run(target: str, tmp_path: Path, *made: str) -> str:
    """`make -n TARGET` in a copy of the Makefile and pyproject.toml, with the stamps `made`
    already there."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    sums = subprocess.run(
        ["cksum", "pyproject.toml"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    for stamp in made:
        (tmp_path / ".venv" / f".installed-{stamp}-{sums}").touch()
    # Not the settings of a `make test` this may run under (it prints "Entering directory").
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout


def test_make_run_installs_the_runtime_only_with_progress(tmp_path: Path) -> None:
    plan = _dry_run("run", tmp_path)
    assert "install --progress-bar on -e ." in plan
    assert "[test]" not in plan and "--quiet" not in plan
    assert plan.count('echo "==> ') >= 3  # a line per phase
    assert plan.strip().splitlines()[-1].strip() == ".venv/bin/undoproxy run"


def test_make_test_adds_the_test_extra_and_runs_in_parallel(tmp_path: Path) -> None:
    plan = _dry_run("test", tmp_path, "run")
    assert "install --progress-bar on -e ." not in plan.replace("'.[test]'", "")
    assert "-e '.[test]'" in plan
    assert "pytest -q -n 3 --dist loadfile" in plan


@pytest.mark.parametrize(("target", "made"), [("run", ("run",)), ("test", ("run", "test"))])
def test_an_installed_venv_is_not_installed_again(
    tmp_path: Path, target: str, made: tuple[str, ...]
) -> None:
    plan = _dry_run(target, tmp_path, *made)
    assert "pip" not in plan
