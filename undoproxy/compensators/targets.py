"""Read-backs over several targets: what each of them must show for an undo to count (pure).

An undo that touches more than one resource (an S3 object and its tag set; one object per
key of a `DeleteObjects`) is verified by reading every one of them. A pack stores this with
its compensation as `readback`:

    {"targets": [
        {"url": ".../bkt/a.txt", "sha256": "…", "length": 11,
         "headers": {"content-type": "text/plain", "x-amz-meta-owner": "ada"}},
        {"url": ".../bkt/a.txt?tagging", "tags": [["team", "blue"]]},
        {"url": ".../bkt/new.txt", "gone": true}],
     "left": [{"url": ".../bkt/a.txt", "etag": "\\"9b2c…\\""}]}

`targets`: the state before the step (rollback verifies every one after sending the undo);
`left`: the state the agent's step left (before the undo, rollback checks nobody changed it
since; a target neither as before nor as left is a conflict and is not overwritten). Checks:
`gone` (404/410), `sha256`+`length`+`headers` (the body and the representation headers:
Content-Type, Cache-Control, Content-Disposition, Content-Language, x-amz-meta-*, ...),
`tags` (an XML `<TagSet>`, compared as a set of pairs), `etag` (compared weakly), `expect`
(JSON field checks, as in readback.py). A target may be an RPC read (`method`, `headers`,
`body_b64`, `absent_when`, as in readback.py): one item of a batch read back by its own
POST. A difference names what differs, never a value.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import Snapshot, parse_json, representation_headers

Check = dict[str, Any]


def gone(url: str) -> Check:
    """`url` must answer 404 or 410."""
    return {"url": url, "gone": True}


def same_as(snap: Snapshot) -> Check:
    """`snap.url` must read as `snap` did: the same body and representation headers."""
    return {
        "url": snap.url,
        "sha256": snap.sha256,
        "length": snap.length,
        "headers": dict(snap.headers),
    }


def tags(url: str, pairs: list[tuple[str, str]]) -> Check:
    """`url` must answer a tag set of exactly these (key, value) pairs."""
    return {"url": url, "tags": sorted([k, v] for k, v in pairs)}


def etag(url: str, value: str) -> Check:
    """`url` must have this ETag (weakly compared)."""
    return {"url": url, "etag": value}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_tags(body: bytes) -> list[tuple[str, str]] | None:
    """The (Key, Value) pairs of an XML `<Tagging><TagSet><Tag>` document, None if it is not
    one. S3 (and S3-compatible servers) read and write tags in this form."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if _local(root.tag) != "Tagging":
        return None
    pairs = []
    for tag in root.iter():
        if _local(tag.tag) != "Tag":
            continue
        fields = {_local(child.tag): child.text or "" for child in tag}
        pairs.append((fields.get("Key", ""), fields.get("Value", "")))
    return pairs


def tagging_xml(pairs: list[tuple[str, str]]) -> bytes:
    """A `<Tagging>` document that sets exactly these tags."""
    root = ET.Element("Tagging", xmlns="http://s3.amazonaws.com/doc/2006-03-01/")
    tag_set = ET.SubElement(root, "TagSet")
    for key, value in pairs:
        tag = ET.SubElement(tag_set, "Tag")
        ET.SubElement(tag, "Key").text = key
        ET.SubElement(tag, "Value").text = value
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def _weak(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value[2:] if value[:2].upper() == "W/" else value


def _header_differences(expected: Mapping[str, str], items: list[tuple[str, str]]) -> list[str]:
    now = representation_headers(items)
    out = []
    for name in sorted(set(expected) | set(now)):
        was, is_ = expected.get(name), now.get(name)
        if was is None:
            out.append(f"header {name} was not there before")
        elif is_ is None:
            out.append(f"header {name} is missing")
        elif " ".join(was.split()).lower() != " ".join(is_.split()).lower():
            out.append(f"header {name} differs")
    return out


def differences(
    check: Check,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    absent: bool | None = None,
    sha256: str | None = None,
    length: int | None = None,
) -> list[str]:
    """How a read (2xx or 404/410) fails `check`; [] when it passes. Names, never values.
    `absent`: the read shows the target absent (None: a 404/410 does); `sha256`, `length`: of
    the whole body, when `body` holds only its first bytes."""
    if absent is None:
        absent = status in (404, 410)
    said = f"{str(check.get('method') or 'GET').upper()} answered {status}"
    if check.get("gone"):
        return [] if absent else [f"it exists ({said})"]
    if absent:
        return [f"it is gone ({said})"]
    out: list[str] = []
    if "expect" in check:  # JSON field checks, as a read-back's (readback.py)
        out.extend(readback.differences(list(check["expect"]), parse_json(body)))
    if "etag" in check:
        now = next((v for k, v in headers.items() if k.lower() == "etag"), None)
        if _weak(now) != _weak(check["etag"]):
            out.append("its ETag differs from what the step left")
    if "sha256" in check and (sha256 or hashlib.sha256(body).hexdigest()) != check["sha256"]:
        size = len(body) if length is None else length
        out.append(f"the body differs ({size} bytes, was {check.get('length', '?')} bytes)")
    if "headers" in check:
        out.extend(_header_differences(check["headers"], list(headers.items())))
    if "tags" in check:
        pairs = parse_tags(body)
        if pairs is None:
            out.append("the answer is not a tag set")
        elif sorted([k, v] for k, v in pairs) != sorted(list(p) for p in check["tags"]):
            out.append("the tags differ")
    return out


def label(url: str) -> str:
    """A short name of a target for a report: its path and query (the host is the step's)."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
