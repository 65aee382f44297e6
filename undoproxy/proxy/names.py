"""One name per request: the host the rules judge is the host the upstream serves.

A request names its host up to four times: the target undoproxy connects to (the absolute
URL of a plain-HTTP request, or the `CONNECT host:port` of a tunnel), the TLS SNI inside the
tunnel, the `Host` header (`:authority` in HTTP/2) and an absolute URL inside the tunnel.
mitmproxy connects to the target but passes SNI and Host on as the agent wrote them, and a
server picks its virtual host by SNI and Host: `POST http://127.0.0.1:P/x` with
`Host: deny.example` was judged as 127.0.0.1 and served as deny.example, and its snapshot and
undo went to 127.0.0.1's default host.

So undoproxy forwards a request only when every name it carries is the same host (letter case,
IPv6 brackets and a trailing dot aside; the port is the target's), and answers anything else
itself: 421 `undoproxy_misdirected` (RFC 9110 §15.5.20) when the names differ, 400 when one
is not a host at all or `Host` is sent twice. Rules, packs, snapshots and compensations then
all use the one name the upstream serves: the request's URL.

RFC 9112 §3.2.2 has a proxy replace the Host of an absolute-form request with the URL's
authority. undoproxy refuses instead: a rewrite would silently send the agent to another
virtual host than the one it wrote; a refusal tells it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mitmproxy import connection, http

from undoproxy.proxy import answers
from undoproxy.proxy.state import state_of

_REG_NAME = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]+")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+")


def host_of(authority: str) -> str | None:
    """The host of `host[:port]` as compared (lower-case, no brackets, no trailing dot), or
    None when `authority` is not one (empty, spaces, a path, a bad port, ...)."""
    value = authority.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not _IPV6.fullmatch(host) or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = value.rpartition(":")
        if not colon:
            host, port_text = value, ""
        port = port_text if colon else None
        if not _REG_NAME.fullmatch(host):
            return None
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        return None
    host = host.lower().rstrip(".")
    return host or None


@dataclass(frozen=True)
class Misdirected:
    """Why a request is refused: its status (421 or 400), the reason and the names it gave."""

    status: int
    reason: str
    names: dict[str, str]


def check(
    target: str, *, authority: str = "", hosts: list[str] | None = None, sni: str | None = None
) -> Misdirected | None:
    """None when every name of the request is `target`'s host, else why not.

    `target`: the host undoproxy connects to (no port); `authority`: an absolute-form URL's
    authority or HTTP/2's `:authority` (empty when none); `hosts`: every `Host` header value;
    `sni`: the TLS server name of a tunnel (None outside one, or when the agent sent none).
    """
    names = {"target": target}
    if authority:
        names["authority"] = authority
    for i, value in enumerate(hosts or []):
        names["host" if i == 0 else f"host#{i + 1}"] = value
    if sni:
        names["sni"] = sni
    if hosts is not None and len(hosts) > 1:
        return Misdirected(400, "the request has more than one Host header", names)
    parsed: dict[str, str] = {}
    for label, value in names.items():
        if label == "target":
            host: str | None = value.strip("[]").lower().rstrip(".") or None
        elif label == "sni":
            host = host_of(value) if ":" not in value else None
        else:
            host = host_of(value)
        if host is None:
            return Misdirected(400, f"the {_LABELS[label]} {value!r} is not a host", names)
        parsed[label] = host
    if len(set(parsed.values())) > 1:
        said = ", ".join(f"{_LABELS[k]} {v}" for k, v in parsed.items())
        return Misdirected(421, f"the request names more than one host ({said})", names)
    return None


_LABELS = {
    "target": "target",
    "authority": "URL authority",
    "host": "Host header",
    "host#2": "second Host header",
    "sni": "TLS server name (SNI)",
}


class OneName:
    """Refuses requests whose names disagree (see the module docstring). Needs the session
    identity's FlowState, so runs right after it."""

    def __init__(self) -> None:
        self._tunnels: set[str] = set()  # client connections that opened a CONNECT tunnel

    def http_connect(self, flow: http.HTTPFlow) -> None:
        """Remember that this connection's requests travel through a tunnel."""
        if flow.response is None:
            self._tunnels.add(flow.client_conn.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Answer 421/400 when the request's names disagree; nothing is forwarded."""
        if flow.response is not None:
            return
        request = flow.request
        client = flow.client_conn
        # The SNI names the upstream only inside a tunnel; on the agent's own TLS connection
        # to undoproxy (an https:// proxy URL) it names undoproxy.
        sni = client.sni if client.id in self._tunnels else None
        wrong = check(
            request.host,
            authority=request.authority,
            hosts=request.headers.get_all("host"),
            sni=sni,
        )
        if wrong is None:
            return
        state = state_of(flow)
        if state is not None:
            state.answered = True
        flow.response = answers.misdirected(wrong.status, wrong.reason, wrong.names)

    def client_disconnected(self, client: connection.Client) -> None:
        """Forget a closed tunnel."""
        self._tunnels.discard(client.id)
