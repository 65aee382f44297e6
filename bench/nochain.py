"""Bench only: `undoproxy run` with the journal's hash chain switched off, for `bench/chain.py`.

    python bench/nochain.py run -c CONFIG

The chain (undoproxy/store/chain.py) is written by TEMP triggers that `chain.install` puts on
the journal writer's connection, in the writer process (undoproxy/store/sqlite_child.py). This
launcher runs the ordinary CLI with the writer process started as `python bench/nochain.py
child ...`, which replaces `install` with a function that does nothing there and then serves
as the ordinary writer: the baseline of the chain's cost is the same undoproxy minus exactly
that work. undoproxy itself has no switch for it (no option,
no environment variable): a journal written this way has rows without chain entries, and
`undoproxy verify` reports it (`bench/chain.py` checks that it does, so that a baseline that
kept its chain by mistake cannot pass for one without).
"""

from __future__ import annotations

import sqlite3
import sys

from undoproxy.store import chain, sqlite_child, sqlite_writer


def _no_chain(conn: sqlite3.Connection, key: chain.ChainKey) -> None:
    """`chain.install` for the baseline: no triggers, so no chain entries (nor a keying
    entry)."""


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        chain.install = _no_chain
        sys.exit(sqlite_child.main(sys.argv[2:]))
    sqlite_writer.CHILD = (sys.executable, __file__, "child")
    from undoproxy.cli import main

    sys.exit(main())
