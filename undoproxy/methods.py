"""Which HTTP methods only read and which change something: the one definition.

Every method except the reads below is a mutation, including WebDAV's `MKCOL`, `MOVE`, `COPY`,
`PROPPATCH`, `LOCK` and any method undoproxy has never heard of: treating an unknown method as
a read would let it through unjournaled, unheld and unreported by rollback. The journal, the
rules, the streaming decision and the docs all use this module.
"""

from __future__ import annotations

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PROPFIND", "REPORT", "SEARCH"})


def is_mutation(method: str) -> bool:
    """True unless `method` is one of the read methods (case-insensitive)."""
    return method.upper() not in READ_METHODS
