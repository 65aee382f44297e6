"""What a WebDAV undo must show when read back: checks over its targets (pure).

The checks are those of compensators/targets.py (`gone`; `sha256`, `length` and `headers` for a
body) plus, for a check with `propfind`, what a PROPFIND of the target must answer:

    {"url": ".../docs/a.txt", "propfind": {"depth": "0", "props": null},
     "dead": {"{urn:x}color": "<ns0:color xmlns:ns0=\"urn:x\">red</ns0:color>"},
     "collection": false}
    {"url": ".../docs/", "propfind": {"depth": "1", "props": null}, "members": ["a.txt"], ...}
    {"url": ".../docs/a.txt", "propfind": {"depth": "0", "props": ["{urn:x}color"]},
     "props": {"{urn:x}color": null}}
    {"url": ".../docs/a.txt", "propfind": {...}, "lock": "opaquelocktoken:...", "held": false}

`dead`: exactly these dead properties (none added, none missing, each the same value);
`collection`: its resourcetype; `members`: the names a `Depth: 1` answer lists under it;
`props`: these properties have these values (null: absent); `lock`/`held`: that lock token is
(not) in its lockdiscovery. Values are compared as XML (davxml.same_value). A difference names
the property, never its value.
"""

from __future__ import annotations

from typing import Any

from undoproxy.compensators import davxml
from undoproxy.compensators.davxml import NotDav, Resource

Check = dict[str, Any]


def _dav(depth: str = "0", names: list[str] | None = None) -> dict[str, Any]:
    return {"depth": depth, "props": names}


def same_properties(url: str, res: Resource, members: list[str] | None = None) -> Check:
    """`url` must have exactly these dead properties (and be a collection or not, likewise)."""
    check: Check = {"url": url, "propfind": _dav(), "dead": res.dead()}
    check["collection"] = res.collection
    if members is not None:
        check["propfind"] = _dav("1")
        check["members"] = members
    return check


def values(url: str, props: dict[str, str | None]) -> Check:
    """`url`'s properties `props` must have these values (None: absent)."""
    return {"url": url, "propfind": _dav("0", list(props)), "props": props}


def lock(url: str, token: str, *, held: bool) -> Check:
    """`url`'s lockdiscovery must (held) or must not list the lock `token`."""
    return {
        "url": url,
        "propfind": _dav("0", [f"{{{davxml.DAV}}}lockdiscovery"]),
        "lock": token,
        "held": held,
    }


def _props_differences(check: Check, res: Resource) -> list[str]:
    out: list[str] = []
    if "collection" in check and res.collection != check["collection"]:
        out.append("it is a collection now" if res.collection else "it is no collection now")
    if "dead" in check:
        now, was = res.dead(), dict(check["dead"])
        for name in sorted(set(now) | set(was)):
            if name not in was:
                out.append(f"property {name} was not there before")
            elif name not in now:
                out.append(f"property {name} is missing")
            elif not davxml.same_value(now[name], was[name]):
                out.append(f"property {name} differs")
    for name, wanted in (check.get("props") or {}).items():
        if name in res.failed:
            out.append(f"property {name} cannot be read (HTTP {res.failed[name]})")
        elif not davxml.same_value(res.props.get(name), wanted):
            out.append(f"property {name} differs")
    if "lock" in check and (check["lock"] in res.lock_tokens()) != check["held"]:
        out.append("the lock is still held" if not check["held"] else "the lock is gone")
    return out


def differences(check: Check, status: int, body: bytes) -> list[str]:
    """How a PROPFIND answer (207, or 404/410) fails a `propfind` check; [] when it passes.
    Names properties, never their values."""
    absent = status in (404, 410)
    if absent:
        return [] if check.get("lock") and not check.get("held") else [f"it is gone ({status})"]
    url = str(check.get("url") or "")
    try:
        res = davxml.resource(body, url)
        out = _props_differences(check, res)
        if "members" in check and davxml.members(body, url) != sorted(check["members"]):
            out.append("its members differ")
    except NotDav as exc:
        return [f"the PROPFIND answer is not readable ({exc})"]
    return out


def propfind_request(check: Check) -> tuple[dict[str, str], bytes]:
    """The headers and body of the PROPFIND a `propfind` check reads with."""
    spec = check.get("propfind") or {}
    headers = {"Depth": str(spec.get("depth") or "0"), "Content-Type": davxml.XML_TYPE}
    return headers, davxml.propfind_body(spec.get("props"))
