"""Packs of the user's, loaded through `include:`, and the rounds of reads a pack may need."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from undoproxy.compensators import packs
from undoproxy.compensators.model import (
    MAX_READ_ROUNDS,
    Facts,
    Irreversible,
    Plan,
    PreRead,
    Snapshot,
)
from undoproxy.config import load_config
from undoproxy.errors import ConfigErrors
from undoproxy.proxy.snapshots import Snapshots
from undoproxy.rules import RequestView

PACK = """\
name: {name}
hosts: [api.orders.test]
rules:
  - name: create-order
    match: {{method: POST, path: /orders}}
    compensate: delete-created
"""


def config(tmp_path: Path, name: str) -> Path:
    (tmp_path / "orders.yaml").write_text(PACK.format(name=name))
    path = tmp_path / "config.yaml"
    path.write_text("include: [orders.yaml]\n")
    return path


def test_an_included_pack_is_a_pack_its_rules_named_and_placed(tmp_path: Path) -> None:
    loaded = load_config(config(tmp_path, "orders"))
    view = RequestView.from_parts("POST", "https://api.orders.test/orders", [], b"{}")
    match = loaded.rules.match(view)
    assert match is not None and match.rule.name == "orders/create-order"
    other = RequestView.from_parts("POST", "https://elsewhere.test/orders", [], b"{}")
    found = loaded.rules.match(other)
    assert found is None or found.rule.name != "orders/create-order"


@pytest.mark.parametrize(
    ("name", "message"),
    [("github", "built-in pack"), ("two words", "a word of letters"), ("", "a word of letters")],
)
def test_a_pack_name_that_clashes_or_is_no_word_is_refused(
    tmp_path: Path, name: str, message: str
) -> None:
    with pytest.raises(ConfigErrors, match=message):
        load_config(config(tmp_path, name))


def _rounds(needed: int) -> list[PreRead]:
    """A pack whose each read needs the one before: `needed` rounds in all."""

    def maker(facts: Facts) -> list[PreRead]:
        done = len(facts.reads)
        return [
            PreRead(f"r{n}", "GET", f"https://h.test/{n}") for n in range(min(done + 1, needed))
        ]

    packs.PACK_READS["test.rounds"] = maker
    snapshots = Snapshots.__new__(Snapshots)

    async def read_all(reads: list[PreRead], flow: Any) -> dict[str, Snapshot]:
        return {r.name: Snapshot(r.url, 200, b"{}") for r in reads}

    snapshots._read_all = read_all  # type: ignore[method-assign]
    try:
        facts = Facts("POST", "https://h.test/x")
        return asyncio.run(snapshots._pre_reads(Plan("test.rounds"), facts, None))  # type: ignore[arg-type]
    finally:
        del packs.PACK_READS["test.rounds"]


def test_reads_that_need_the_one_before_take_up_to_max_read_rounds() -> None:
    assert [r.name for r in _rounds(MAX_READ_ROUNDS)] == [f"r{n}" for n in range(MAX_READ_ROUNDS)]
    with pytest.raises(Irreversible, match=f"more than {MAX_READ_ROUNDS} rounds"):
        _rounds(MAX_READ_ROUNDS + 1)
