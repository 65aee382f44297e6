"""The names a rule may give as `compensate:`; one list, read by validation, docs and builders."""

from __future__ import annotations

from undoproxy.compensators import (
    awsservices,
    chroma,
    couchdb,
    datasette,
    dynamodb,
    etcd,
    github,
    jupyter,
    matrix,
    postgrest,
    s3,
    slack,
    stripe,
    webdav,
)

GENERIC: dict[str, str] = {
    "restore": "PUT the snapshot back to the snapshot URL (exact prior state)",
    "delete-created": "DELETE what a POST created (Location header, else the response id)",
    "recreate": "put a deleted resource back from its snapshot (PUT, else POST to the collection)",
    "none": "record the step as irreversible",
}

# API packs: named compensators that know one API's inverse operations.
PACKS: dict[str, str] = {
    **github.DESCRIPTIONS,
    **stripe.DESCRIPTIONS,
    **slack.DESCRIPTIONS,
    **matrix.DESCRIPTIONS,
    **s3.DESCRIPTIONS,
    **webdav.DESCRIPTIONS,
    **couchdb.DESCRIPTIONS,
    **etcd.DESCRIPTIONS,
    **dynamodb.DESCRIPTIONS,
    **awsservices.DESCRIPTIONS,
    **chroma.DESCRIPTIONS,
    **datasette.DESCRIPTIONS,
    **postgrest.DESCRIPTIONS,
    **jupyter.DESCRIPTIONS,
}

NEEDS_SNAPSHOT = frozenset({"restore", "recreate"})


def known_names() -> frozenset[str]:
    """Every name accepted as a named compensator."""
    return frozenset(GENERIC) | frozenset(PACKS)
