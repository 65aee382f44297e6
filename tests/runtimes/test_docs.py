"""docs/clients.md and the tests agree: every row marked tested names a test of
test_clients.py, every such test has its row, and every variable `env` sets is documented."""

from __future__ import annotations

import re
from pathlib import Path

from tests.runtimes.test_clients import CLIENTS
from undoproxy.runtimes.env import Setup, variables

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def _matrix() -> dict[str, str]:
    """client -> its 'tested' cell, from the matrix table."""
    text = DOC.read_text().split("## The matrix", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    return {cells[0]: cells[1] for cells in (r.strip("|").split(" | ") for r in rows[1:])}


def test_every_tested_row_is_a_test_and_every_test_a_row() -> None:
    names = {c.name for c in CLIENTS}
    tested = {m for cell in _matrix().values() for m in re.findall(r"^`([^`]+)`", cell.strip())}
    assert tested == names


def test_untested_rows_say_so() -> None:
    for client, cell in _matrix().items():
        assert cell.strip().startswith("`") or "not" in cell, f"{client}: {cell}"


def test_every_variable_env_sets_is_documented() -> None:
    setup = Setup(
        proxy_url="http://s:t@127.0.0.1:8080",
        ca_cert=Path("/s/ca.pem"),
        ca_bundle=Path("/s/bundle.pem"),
        no_proxy=("127.0.0.1",),
        session="s",
        session_port=("127.0.0.1", 9),
    )
    doc = DOC.read_text()
    for name, _ in variables(setup):
        assert f"`{name}" in doc or f", `{name}`" in doc, f"docs/clients.md misses {name}"
