"""S3 compensators: the inverse of each object write the `s3` pack recognises (pure).

S3 requests are signed (SigV4), so these only run when `signing:` gives undoproxy a key for
the host: undoproxy signs the snapshots, the undo and its read-back itself (`signing.py`).
Each operation says which GETs it needs before it is forwarded (`SNAPSHOTS`: the object and
its `?tagging`, for every key a `DeleteObjects` names), and its builder turns them into the
inverse request and a read-back over every target (`targets.py`):

    PutObject, CopyObject    creating: DELETE it; overwriting: PUT back the prior body, its
                             Content-Type, Cache-Control, Content-Disposition, Content-Language,
                             Expires, x-amz-meta-* and tags (x-amz-tagging)
    DeleteObject             PUT it back the same way
    PutObjectTagging,
    DeleteObjectTagging      PUT ?tagging the prior tag set (DELETE ?tagging when it had none)
    DeleteObjects            one such PUT per key that existed and was deleted

URLs work path-style (`https://host/bucket/key`, custom endpoints) and virtual-hosted
(`https://bucket.s3.REGION.amazonaws.com/key`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from undoproxy.compensators import targets
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    Snapshot,
    restore_headers,
)
from undoproxy.compensators.model import inverse_request as request

MAX_KEYS = 100  # a DeleteObjects with more keys is irreversible (2 GETs per key before it)
# Query parameters an object write may carry and still be the plain operation.
_PLAIN_QUERY = frozenset({"x-id"})
# bucket.s3.amazonaws.com, bucket.s3.eu-west-1.amazonaws.com, bucket.s3-eu-west-1...,
# bucket.s3.dualstack.eu-west-1.amazonaws.com: the bucket is in the host, the key is the path.
_VIRTUAL_HOSTED = re.compile(r"^.+\.s3[.-]([a-z0-9-]+\.)*amazonaws\.com(\.cn)?$")


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def key_of(url: str) -> str:
    """The object key a URL names ('' for the bucket itself)."""
    path = urlsplit(url).path.lstrip("/")
    if not _VIRTUAL_HOSTED.match(_host(url)):
        path = path.partition("/")[2]  # path-style: the first segment is the bucket
    return unquote(path)


def object_url(url: str) -> str:
    """The URL of the object itself (no query)."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


def tagging_url(url: str) -> str:
    """The URL of the object's tag set."""
    return object_url(url) + "?tagging"


def key_url(bucket_url: str, key: str) -> str:
    """The URL of `key` in the bucket `bucket_url` names (quoted as boto3 quotes keys)."""
    return object_url(bucket_url).rstrip("/") + "/" + quote(key, safe="/~")


def _query_names(url: str) -> set[str]:
    return {k for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}


def _what(method: str, url: str) -> str:
    p = urlsplit(url)
    return f"{method} {p.path}{'?' + p.query if p.query else ''}"


def _plain_object(method: str, url: str) -> None:
    """Irreversible unless the request is a plain write of one object (no sub-resource)."""
    if not key_of(url):
        raise Irreversible(
            f"{_what(method, url)} is a bucket-level operation; the s3 pack undoes object "
            "writes only: check by hand"
        )
    extra = _query_names(url) - _PLAIN_QUERY
    if extra:
        raise Irreversible(
            f"{_what(method, url)} acts on ?{', ?'.join(sorted(extra))}, which the s3 pack "
            "cannot undo (a multipart part, an ACL, a version, ...): check by hand"
        )


# --- before forwarding: what to read ----------------------------------------------------------


def object_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """PutObject, CopyObject, DeleteObject: the object, then its tags."""
    _plain_object(method, url)
    return [object_url(url), tagging_url(url)]


def tagging_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """PutObjectTagging, DeleteObjectTagging: the tag set."""
    if not key_of(url) or _query_names(url) - _PLAIN_QUERY - {"tagging"}:
        raise Irreversible(f"{_what(method, url)}: only an object's current tags are undone")
    return [tagging_url(url)]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _entries(body: bytes | None, element: str) -> list[dict[str, str]]:
    """The `<element>` children of an XML document, each as {child name: text}."""
    if not body:
        return []
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return []
    return [
        {_local(child.tag): child.text or "" for child in node}
        for node in root.iter()
        if _local(node.tag) == element
    ]


def delete_objects_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """DeleteObjects: each named key and its tags."""
    objects = _entries(body, "Object")
    if not objects:
        raise Irreversible("the DeleteObjects body names no key (it is not the XML S3 reads)")
    if any(o.get("VersionId") for o in objects):
        raise Irreversible(
            "the DeleteObjects names object versions: deleting a version is permanent and "
            "cannot be undone by writing the object again; check by hand"
        )
    if len(objects) > MAX_KEYS:
        raise Irreversible(
            f"the DeleteObjects names {len(objects)} keys; undoproxy reads at most {MAX_KEYS} "
            "before a batch delete (split it, or accept it as irreversible)"
        )
    urls: list[str] = []
    for o in objects:
        url_of_key = key_url(url, o.get("Key", ""))
        urls += [url_of_key, tagging_url(url_of_key)]
    return urls


# --- after the answer: the inverse and its read-back ------------------------------------------


def _snapshot(facts: Facts, url: str) -> Snapshot:
    snap = facts.snapshots.get(url)
    if snap is None:
        raise Irreversible(f"no snapshot of {targets.label(url)} was taken before the step")
    return snap


def _tags(facts: Facts, url: str) -> list[tuple[str, str]]:
    snap = _snapshot(facts, tagging_url(url))
    if not snap.existed:
        return []
    pairs = targets.parse_tags(snap.body)
    if pairs is None:
        raise Irreversible(f"the tags of {targets.label(url)} could not be read before the step")
    return pairs


def _put_back(url: str, snap: Snapshot, tags: list[tuple[str, str]]) -> dict[str, Any]:
    """PUT the object as it was: body, representation headers, user metadata and tags."""
    headers = restore_headers(snap)
    if tags:
        headers["x-amz-tagging"] = urlencode(tags)
    return request(
        "PUT", url, snap.replay_body, snap.content_type or "binary/octet-stream", headers or None
    )


def _as_before(url: str, snap: Snapshot, tags: list[tuple[str, str]]) -> list[targets.Check]:
    return [targets.same_as(snap), targets.tags(tagging_url(url), tags)]


def _readback(expect: list[targets.Check], left: list[targets.Check]) -> dict[str, Any]:
    out: dict[str, Any] = {"targets": expect}
    if left:
        out["left"] = left
    return out


def undo_object(facts: Facts) -> dict[str, Any]:
    """PutObject / CopyObject: delete a created object, put back an overwritten one;
    DeleteObject: put it back."""
    url = object_url(facts.url)
    snap = _snapshot(facts, url)
    if facts.method == "DELETE":
        if not snap.existed:
            raise NothingToUndo("the object did not exist before the DELETE", "read")
        tags = _tags(facts, url)
        out = _put_back(url, snap, tags)
        out["readback"] = _readback(_as_before(url, snap, tags), [targets.gone(url)])
        return out
    etag = facts.response_header("ETag")
    left = [targets.etag(url, etag)] if etag else []
    if not snap.existed:
        out = request("DELETE", url)
        out["readback"] = _readback([targets.gone(url)], left)
        return out
    tags = _tags(facts, url)
    out = _put_back(url, snap, tags)
    out["readback"] = _readback(_as_before(url, snap, tags), left)
    return out


def undo_tagging(facts: Facts) -> dict[str, Any]:
    """PutObjectTagging / DeleteObjectTagging: the prior tag set back."""
    url = tagging_url(facts.url)
    snap = _snapshot(facts, url)
    if not snap.existed:
        raise Irreversible(f"the tags of {targets.label(url)} could not be read before the step")
    before = _tags(facts, url)
    if facts.method == "DELETE":
        left_tags: list[tuple[str, str]] | None = []
    else:
        left_tags = targets.parse_tags(facts.request_body)
    left = [targets.tags(url, left_tags)] if left_tags is not None else []
    if before:
        out = request("PUT", url, targets.tagging_xml(before), "application/xml")
    else:
        out = request("DELETE", url)
    out["readback"] = _readback([targets.tags(url, before)], left)
    return out


def undo_delete_objects(facts: Facts) -> dict[str, Any]:
    """DeleteObjects: one PUT per key that existed and that the answer says was deleted."""
    asked = [o.get("Key", "") for o in _entries(facts.request_body, "Object")]
    failed = {e.get("Key", "") for e in _entries(facts.response_body, "Error")}
    puts: list[dict[str, Any]] = []
    expect: list[targets.Check] = []
    left: list[targets.Check] = []
    for key in dict.fromkeys(asked):
        if key in failed:
            continue  # S3 refused to delete it: nothing to undo
        url = key_url(facts.url, key)
        snap = _snapshot(facts, url)
        if not snap.existed:
            continue
        tags = _tags(facts, url)
        puts.append(_put_back(url, snap, tags))
        expect += _as_before(url, snap, tags)
        left.append(targets.gone(url))
    if not puts:
        raise NothingToUndo("none of the keys it deleted existed before", "read")
    out = dict(puts[0])
    if len(puts) > 1:
        out["then"] = puts[1:]
    out["readback"] = _readback(expect, left)
    return out


SNAPSHOTS: dict[str, Callable[[str, str, bytes], list[str]]] = {
    "s3.object": object_snapshots,
    "s3.tagging": tagging_snapshots,
    "s3.delete-objects": delete_objects_snapshots,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "s3.object": undo_object,
    "s3.tagging": undo_tagging,
    "s3.delete-objects": undo_delete_objects,
}

DESCRIPTIONS = {
    "s3.object": "DELETE a created object; PUT back an overwritten or deleted one "
    "(body, headers, x-amz-meta-*, tags)",
    "s3.tagging": "PUT ?tagging the prior tag set (DELETE ?tagging when there was none)",
    "s3.delete-objects": "PUT back each key a DeleteObjects deleted (body, headers, tags)",
}
