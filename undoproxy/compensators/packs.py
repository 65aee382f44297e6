"""API packs: named compensators that know one API's inverse operations (one module per API).

Each builder takes the step's Facts (after a successful response) and returns the inverse
request, or raises Irreversible saying why it cannot (NothingToUndo when the API reported a
failure inside a 2xx answer). See `github.py`, `stripe.py` and `slack.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from undoproxy.compensators import (
    awsservices,
    chroma,
    couchdb,
    datasette,
    davrequests,
    dynamodb,
    etcd,
    github,
    jupyter,
    matrix,
    postgrest,
    rpc,
    s3,
    slack,
    stripe,
    webdav,
)
from undoproxy.compensators.model import Facts, Plan, PreRead

PACK_BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    **github.BUILDERS,
    **stripe.BUILDERS,
    **slack.BUILDERS,
    **matrix.BUILDERS,
    **s3.BUILDERS,
    **webdav.BUILDERS,
    **couchdb.BUILDERS,
    **etcd.BUILDERS,
    **dynamodb.BUILDERS,
    **awsservices.BUILDERS,
    **chroma.BUILDERS,
    **datasette.BUILDERS,
    **postgrest.BUILDERS,
    **jupyter.BUILDERS,
}

# Packs that read more than the request's own URL before forwarding: name -> the URLs to GET,
# from (method, url, body); raises Irreversible when the request cannot be undone at all.
PACK_SNAPSHOTS: dict[str, Callable[[str, str, bytes], list[str]]] = {
    **s3.SNAPSHOTS,
    **couchdb.SNAPSHOTS,
}

# Packs that read something other than a GET before forwarding (a PROPFIND of the properties, a
# GET of a MOVE's destination): name -> the reads, from the step's Facts (see PreRead).
PACK_READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    **webdav.READS,
    **etcd.READS,
    **dynamodb.READS,
    **awsservices.READS,
    **chroma.READS,
    **datasette.READS,
    **postgrest.READS,
    **jupyter.READS,
}


# Packs whose undo is built from the reads before the step alone, never from its answer: built
# also when the step was answered with an error (an error is no evidence that nothing changed),
# so that rollback can read their read-back and tell (as before: nothing to undo).
FROM_BEFORE: frozenset[str] = frozenset(
    {"rpc", "dynamodb.items", "dynamodb.create-table", "ssm.parameters", "etcd.delete-range"}
)


def reads_for(plan: Plan, facts: Facts) -> list[PreRead]:
    """What a compensation of `plan.kind` reads before forwarding, besides its snapshot GETs;
    `facts.reads` holds what earlier rounds answered (a pack whose second read depends on its
    first asks for it once the first is there). Raises Irreversible.

    `recreate` also reads the target's WebDAV properties (optional: a server that does not
    speak WebDAV answers with an error and has none to lose), so that a deleted file gets its
    dead properties back and a deleted collection is known as one.
    """
    kind, snapshot_url = plan.kind, plan.snapshot_url
    if kind == "rpc" and plan.template is not None:
        return rpc.reads(plan.template, facts)
    if kind == "recreate" and snapshot_url:
        if facts.snapshot is not None and not facts.snapshot.existed:
            return []  # nothing was there: nothing to recreate, no properties to keep
        return [davrequests.properties_read(snapshot_url)]
    maker = PACK_READS.get(kind)
    return maker(facts) if maker is not None else []
