"""The CA bundle in the state dir, which replicas of one undoproxy share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from undoproxy import cabundle

WRITE_MANY = """
import sys
from pathlib import Path
from undoproxy.cabundle import write_bundle
for _ in range(40):
    write_bundle(Path(sys.argv[1]))
"""


def test_replicas_starting_at_once_on_one_state_dir_all_write_the_bundle(tmp_path: Path) -> None:
    ca = cabundle.ensure_ca(tmp_path)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITE_MANY, str(tmp_path)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 4, "\n".join(errors)
    bundle = (tmp_path / cabundle.BUNDLE_NAME).read_text()
    assert bundle.endswith(ca.read_text())
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
