"""store.url in the config, and `undoproxy run` when the database cannot be used."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from undoproxy.config import load_config
from undoproxy.errors import ConfigErrors


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_store_url_and_heartbeat_are_read(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "store:\n  url: postgresql://u:p@db:5432/j\n  heartbeat: 2s\n")
    )
    assert (config.store_url, config.store_heartbeat) == ("postgresql://u:p@db:5432/j", 2.0)
    assert load_config(None).store_url is None


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ("  url: mysql://x/y\n", "config.yaml:3: store.url: expected a postgresql://"),
        (
            "  path: j.db\n  url: postgresql://u@h/db\n",
            "config.yaml:4: store.url and store.path: give one",
        ),
        ("  url: postgresql://u@h/db\n  heartbeat: 0s\n", "config.yaml:4: store.heartbeat:"),
    ],
)
def test_a_wrong_store_is_named_with_its_line(tmp_path: Path, store: str, message: str) -> None:
    path = write(tmp_path, f"# c\nstore:\n{store}")
    with pytest.raises(ConfigErrors) as raised:
        load_config(path)
    assert message in str(raised.value)


def test_a_database_that_cannot_be_reached_stops_run_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    path = write(
        tmp_path,
        f"state_dir: {tmp_path / 'state'}\nproxy:\n  listen: 127.0.0.1:0\nadmin:\n"
        f"  listen: 127.0.0.1:0\nstore:\n  url: postgresql://u:hunter2@127.0.0.1:{port}/db\n",
    )
    run = subprocess.run(
        [sys.executable, "-m", "undoproxy", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert f"cannot connect to the journal at postgresql://u:***@127.0.0.1:{port}/db" in run.stderr
    assert "hunter2" not in run.stdout + run.stderr
    assert "Traceback" not in run.stderr
