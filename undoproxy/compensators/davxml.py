"""WebDAV's XML, as the webdav pack needs it: properties read, written and compared (pure).

A property is kept as the XML text of its element (`<Z:color xmlns:Z="urn:x">red</Z:color>`),
keyed by its Clark name (`{urn:x}color`), so that it can be sent back in a `PROPPATCH` exactly as
the server gave it. Two values are compared by structure: element names, attributes, children
and text, with namespace prefixes and the whitespace between child elements ignored.

Dead properties are the ones a client set (`PROPPATCH`) and the server only stores: every
property outside the `DAV:` namespace, except the few that servers compute themselves.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit
from xml.sax.saxutils import quoteattr

DAV = "DAV:"
# Properties outside DAV: that servers compute (never restored, never compared). A live
# property a client can set is not one of them: Apache's `executable` (a file's x bit, set by
# PROPPATCH) is restored and compared like any dead property, or a restore would lose it.
LIVE_NAMESPACES = frozenset({"http://radicale.org/ns/"})
LIVE_NAMES = frozenset(
    {
        "{http://calendarserver.org/ns/}getctag",
        "{http://sabredav.org/ns}sync-token",
    }
)
MAX_XML = 10 * 1024 * 1024

Props = dict[str, str | None]  # Clark name -> the element's XML, None: the property is absent


class NotDav(ValueError):
    """The body is not the WebDAV XML that was expected; the message says what it is."""


def _parse(body: bytes) -> ET.Element:
    if len(body) > MAX_XML:
        raise NotDav(f"the XML is larger than {MAX_XML} bytes")
    head = body[:4096].lower()
    if b"<!doctype" in head or b"<!entity" in head:
        raise NotDav("the XML declares a DOCTYPE or entities; it is not read")
    try:
        return ET.fromstring(body)
    except ET.ParseError as exc:
        raise NotDav(f"the body is not XML ({exc})") from None


def clark(name: str) -> str:
    """`{urn:x}color` from a Clark name or `urn:x color`."""
    if name.startswith("{"):
        return name
    ns, _, local = name.rpartition(" ")
    return f"{{{ns}}}{local}"


def split(name: str) -> tuple[str, str]:
    """(namespace, local name) of a Clark name."""
    if name.startswith("{"):
        ns, _, local = name[1:].partition("}")
        return ns, local
    return "", name


def is_dead(name: str) -> bool:
    """True for a property a client sets and the server only stores."""
    ns, _ = split(name)
    return ns != DAV and ns not in LIVE_NAMESPACES and name not in LIVE_NAMES


def _shape(elem: ET.Element) -> Any:
    text = elem.text or ""
    children = [_shape(c) for c in elem]
    tails = [(c.tail or "") for c in elem]
    if children and not text.strip() and not any(t.strip() for t in tails):
        text = ""  # indentation between elements is not content
    return [elem.tag, sorted(elem.attrib.items()), text, children, [t for t in tails if t.strip()]]


def same_value(a: str | None, b: str | None) -> bool:
    """Two property values (element XML, or None for absent) are the same property value."""
    if a is None or b is None:
        return a is b
    try:
        return bool(_shape(_parse(a.encode())) == _shape(_parse(b.encode())))
    except NotDav:
        return a == b


@dataclass
class Resource:
    """One `<response>` of a multistatus: its href, status and properties."""

    href: str
    status: int | None = None  # a `<status>` of the response itself (no propstat)
    props: Props = field(default_factory=dict)  # found (200) as XML; not found (404) as None
    failed: dict[str, int] = field(default_factory=dict)  # other statuses (403, 424, ...)

    @property
    def collection(self) -> bool:
        """True when its resourcetype says collection."""
        value = self.props.get(f"{{{DAV}}}resourcetype")
        return value is not None and f"{{{DAV}}}collection" in _children(value)

    def dead(self) -> dict[str, str]:
        """Its dead properties that have a value."""
        return {k: v for k, v in self.props.items() if v is not None and is_dead(k)}

    def lock_tokens(self) -> set[str]:
        """The lock tokens its `lockdiscovery` lists."""
        value = self.props.get(f"{{{DAV}}}lockdiscovery")
        if not value:
            return set()
        root = _parse(value.encode())
        return {
            (h.text or "").strip()
            for token in root.iter(f"{{{DAV}}}locktoken")
            for h in token.iter(f"{{{DAV}}}href")
        }


def _children(xml: str) -> set[str]:
    try:
        return {c.tag for c in _parse(xml.encode())}
    except NotDav:
        return set()


def _status(text: str | None) -> int:
    parts = (text or "").split()
    try:
        return int(parts[1])
    except (IndexError, ValueError):
        return 0


def multistatus(body: bytes) -> list[Resource]:
    """The resources of a `207 Multi-Status` answer; NotDav when it is not one."""
    root = _parse(body)
    if root.tag != f"{{{DAV}}}multistatus":
        raise NotDav(f"the answer is a {split(root.tag)[1]!r} document, not a multistatus")
    out = []
    for response in root.findall(f"{{{DAV}}}response"):
        href = (response.findtext(f"{{{DAV}}}href") or "").strip()
        res = Resource(href)
        own = response.find(f"{{{DAV}}}status")
        if own is not None:
            res.status = _status(own.text)
        for propstat in response.findall(f"{{{DAV}}}propstat"):
            code = _status(propstat.findtext(f"{{{DAV}}}status"))
            prop = propstat.find(f"{{{DAV}}}prop")
            for elem in prop if prop is not None else []:
                if 200 <= code < 300:
                    res.props[elem.tag] = ET.tostring(elem, encoding="unicode").strip()
                elif code == 404:
                    res.props[elem.tag] = None
                else:
                    res.failed[elem.tag] = code
        out.append(res)
    return out


def path_of(href: str, base: str) -> str:
    """The decoded path an href names (relative hrefs resolved against `base`), no trailing /."""
    return unquote(urlsplit(urljoin(base, href)).path).rstrip("/") or "/"


def resource(body: bytes, url: str) -> Resource:
    """The multistatus entry for `url` itself; NotDav when there is none."""
    want = path_of(url, url)
    for res in multistatus(body):
        if path_of(res.href, url) == want:
            return res
    raise NotDav("the multistatus has no entry for the resource itself")


def members(body: bytes, url: str) -> list[str]:
    """The names of a collection's members in a `Depth: 1` answer, sorted."""
    own = path_of(url, url)
    names = []
    for res in multistatus(body):
        path = path_of(res.href, url)
        if path != own and path.startswith(own.rstrip("/") + "/"):
            names.append(path[len(own.rstrip("/")) + 1 :])
    return sorted(names)


# --- requests --------------------------------------------------------------------------------

XML_TYPE = "application/xml; charset=utf-8"
_HEAD = '<?xml version="1.0" encoding="utf-8"?>\n'


def propfind_body(names: list[str] | None = None) -> bytes:
    """A PROPFIND body asking for `names` (Clark names), or for every property (allprop)."""
    if names is None:
        return (_HEAD + '<D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>').encode()
    wanted = "".join(_empty(n) for n in names)
    return (_HEAD + f'<D:propfind xmlns:D="DAV:"><D:prop>{wanted}</D:prop></D:propfind>').encode()


def _empty(name: str) -> str:
    ns, local = split(name)
    return f"<X:{local} xmlns:X={quoteattr(ns)}/>"


def proppatch_body(set_: dict[str, str], remove: list[str]) -> bytes:
    """A PROPPATCH body that sets each property to its element XML and removes the others."""
    parts = [_HEAD, '<D:propertyupdate xmlns:D="DAV:">']
    if set_:
        parts.append("<D:set><D:prop>" + "".join(set_.values()) + "</D:prop></D:set>")
    if remove:
        parts.append(
            "<D:remove><D:prop>" + "".join(_empty(n) for n in remove) + "</D:prop></D:remove>"
        )
    parts.append("</D:propertyupdate>")
    return "".join(parts).encode()


def proppatch_names(body: bytes) -> tuple[dict[str, str], list[str]]:
    """What a PROPPATCH body does: ({name: value XML} set, [name] removed), later wins."""
    root = _parse(body)
    if root.tag != f"{{{DAV}}}propertyupdate":
        raise NotDav("the PROPPATCH body is not a DAV:propertyupdate")
    set_: dict[str, str] = {}
    removed: list[str] = []
    for op in root:
        prop = op.find(f"{{{DAV}}}prop")
        for elem in prop if prop is not None else []:
            if op.tag == f"{{{DAV}}}set":
                set_[elem.tag] = ET.tostring(elem, encoding="unicode").strip()
                removed = [n for n in removed if n != elem.tag]
            elif op.tag == f"{{{DAV}}}remove":
                set_.pop(elem.tag, None)
                removed.append(elem.tag)
    return set_, list(dict.fromkeys(removed))


def changed_any(body: bytes | None, names: list[str]) -> bool:
    """Did a PROPPATCH answer (207) report any of `names` as done (2xx)? True if not a 207."""
    if not body:
        return True
    try:
        found = multistatus(body)
    except NotDav:
        return True
    return any(k in r.props and r.props[k] is not None for r in found for k in names) or not any(
        r.failed for r in found
    )
