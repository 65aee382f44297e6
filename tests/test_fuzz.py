"""Property-based tests: arbitrary JSON, headers, URLs and bodies never break the redactor, the
template renderer or the rules engine, and a planted secret never survives redaction; random
bytes sent through a real `undoproxy run` reach the upstream only journaled and judged."""

from __future__ import annotations

import base64
import bz2
import contextlib
import gzip
import json
import os
import socket
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

import brotli  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from undoproxy import redact
from undoproxy.errors import Location
from undoproxy.rules import (
    NOT_JSON,
    RequestView,
    RuleSet,
    TemplateContext,
    TemplateError,
    format_explanation,
    parse_rules,
    render_template,
    render_url,
)
from undoproxy.rules.templates import render_known
from undoproxy.yamlsource import load_file

from .proxy.wire import RawUpstream, read_answer, tunnel
from .rules.helpers import rule_set
from .support.proc import Undoproxy
from .test_redact import SECRET_NAMES

# FUZZ_EXAMPLES=5000 for a longer hunt; the suite keeps each property to a bounded run.
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# --- strategies ---------------------------------------------------------------------------

# A planted secret carries a marker that the other generated data cannot contain by chance.
secrets = st.from_regex(r"S3CR3T[A-Za-z0-9]{4,12}", fullmatch=True)
secret_names = st.sampled_from(SECRET_NAMES).filter(bool) | st.builds(
    lambda pre, sep, part: pre + sep + part if pre else part,
    st.sampled_from(["", "x", "new", "user", "db", "Stripe", "my"]),
    st.sampled_from(["_", "-", "."]),
    st.sampled_from(["password", "token", "api_key", "secret", "signature", "key", "auth"]),
)
text = st.text(max_size=40)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)


@st.composite
def planted_json(draw: st.DrawFn) -> tuple[Any, str]:
    """A JSON document with a secret under a secret-named key, possibly very deep."""
    secret = draw(secrets)
    payload = draw(st.sampled_from([secret, [secret], {"a": [1, secret]}, [{"b": secret}]]))
    doc: Any = {draw(secret_names): payload}
    if draw(st.booleans()):
        doc[draw(st.text(max_size=8))] = draw(json_values)
    for _ in range(draw(st.integers(0, 90))):  # crosses redact.MAX_DEPTH
        doc = draw(st.sampled_from([[doc], {"data": doc}, [draw(json_scalars), doc]]))
    return doc, secret


# --- the redactor --------------------------------------------------------------------------


@FUZZ
@given(planted_json(), st.booleans())
def test_a_secret_in_a_json_body_never_survives(planted: tuple[Any, str], ascii_only: bool) -> None:
    doc, secret = planted
    body = json.dumps(doc, ensure_ascii=ascii_only).encode()
    for content_type in ("application/json", "", "text/plain"):
        shown = redact.body_text(body, content_type)
        assert shown is not None and secret not in shown
    assert secret not in json.dumps(redact.json_value(doc))


@FUZZ
@given(json_values)
def test_json_keeps_its_shape(doc: Any) -> None:
    shown = redact.json_value(doc)
    assert type(shown) is type(doc) or isinstance(doc, str)
    if isinstance(doc, dict):
        assert list(shown) == list(doc)
    assert redact.json_value(shown) == shown  # redacting twice changes nothing more
    for ascii_only in (True, False):
        shown = redact.body_text(
            json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
        )
        assert shown is not None
        shown.encode("utf-8")


@FUZZ
@given(st.binary(max_size=200), text)
def test_any_body_is_shown_without_an_exception(body: bytes, content_type: str) -> None:
    shown = redact.body_text(body, content_type)
    assert shown is not None
    shown.encode("utf-8")  # the page and the exports can write it


@FUZZ
@given(st.integers(1, 3000), st.sampled_from(["[", '{"a":', "{", '["', '{"password":[']))
def test_any_nesting_is_shown_without_an_exception(depth: int, opener: str) -> None:
    body = (opener * depth).encode()
    shown = redact.body_text(body, "application/json")
    assert shown is not None
    if "not parsed" in shown:
        assert len(shown) < redact.EXCERPT + 500


@FUZZ
@given(
    st.lists(st.tuples(text, text), max_size=6),
    secret_names,
    secrets,
    st.integers(0, 6),
    st.sampled_from(["raw", "url", "pair"]),
)
def test_a_secret_in_headers_never_survives(
    others: list[tuple[str, str]], name: str, secret: str, at: int, how: str
) -> None:
    planted = {
        "raw": (name, f"Bearer {secret}"),
        "url": ("Location", f"https://app.test/cb?{name}={secret}&state=1"),
        "pair": ("X-Note", f"a=1; {name}={secret}"),
    }[how]
    items = [*others[:at], planted, *others[at:]]
    shown = redact.headers(items)
    assert [k for k, _ in shown] == [k for k, _ in items]
    assert secret not in repr(shown)


@FUZZ
@given(
    st.sampled_from(["http", "https"]),
    st.sampled_from(["api.test", "api.test:8443", "[::1]:5000", "127.0.0.1"]),
    st.lists(text, max_size=4),
    st.lists(st.tuples(text, text), max_size=5),
    secret_names,
    secrets,
    st.integers(0, 5),
    st.sampled_from(["query", "userinfo", "fragment"]),
)
def test_a_secret_in_a_url_never_survives(
    scheme: str,
    host: str,
    segments: list[str],
    pairs: list[tuple[str, str]],
    name: str,
    secret: str,
    at: int,
    where: str,
) -> None:
    query = [quote_plus(k) + "=" + quote_plus(v) for k, v in pairs]
    userinfo = ""
    fragment = ""
    if where == "query":
        query.insert(at, quote_plus(name) + "=" + quote_plus(secret))
    elif where == "userinfo":
        userinfo = f"agent:{secret}@"
    else:
        fragment = f"#{quote(name)}={secret}&state=1"
    path = "/" + "/".join(quote(s, safe="") for s in segments)
    value = f"{scheme}://{userinfo}{host}{path}?{'&'.join(query)}{fragment}"
    shown = redact.url(value)
    assert secret not in shown
    assert urlsplit(shown).hostname == urlsplit(value).hostname  # still a URL, same host
    assert secret not in redact.text(f"GET {value} failed: timeout")


@FUZZ
@given(text)
def test_any_text_is_a_url_or_text_without_an_exception(value: str) -> None:
    redact.url(value)
    redact.text(value)
    redact.query(value)
    redact.is_secret_name(value)


@FUZZ
@given(
    st.lists(st.tuples(text, text), max_size=6),
    secret_names,
    secrets,
    st.integers(0, 6),
    st.sampled_from(["", "application/x-www-form-urlencoded", "text/plain"]),
)
def test_a_secret_in_a_form_never_survives(
    pairs: list[tuple[str, str]], name: str, secret: str, at: int, content_type: str
) -> None:
    fields = [quote_plus(k) + "=" + quote_plus(v) for k, v in pairs]
    fields.insert(at, quote_plus(name) + "=" + quote_plus(secret))
    shown = redact.body_text("&".join(fields).encode(), content_type)
    assert shown is not None and secret not in shown


@FUZZ
@given(text, secret_names, secrets, text, st.sampled_from([" ", "\n", "&", "; ", "\t"]))
def test_a_secret_pair_in_text_never_survives(
    before: str, name: str, secret: str, after: str, sep: str
) -> None:
    shown = redact.text(f"{before}{sep}{name}={secret}{sep}{after}")
    assert secret not in shown


# --- the template renderer -----------------------------------------------------------------

PATHS = ["", ".id", ".a.b", "[0]", "[*]", ".items[*].id", "['x y']", "..id", ".l[?(@.n > 1)]"]
template_parts = st.one_of(
    text,
    st.sampled_from(["{", "}", "{{", "}}", "$", "${", "{id}", "{owner}", "{nope}", "${}"]),
    st.builds(
        lambda src, path: "${" + src + path + "}",
        st.sampled_from(["request.body", "response.body", "snapshot.body", "body"]),
        st.sampled_from(PATHS) | text,
    ),
    st.builds(
        lambda name: "${response.headers." + name + "}", st.sampled_from(["Location", "X-A"]) | text
    ),
)
templates = st.lists(template_parts, max_size=6).map("".join)
template_values = st.recursive(
    templates | json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
contexts = st.builds(
    TemplateContext,
    captures=st.dictionaries(st.sampled_from(["id", "owner", "repo"]) | text, text, max_size=3),
    request_body=json_values,
    response_body=json_values,
    response_headers=st.dictionaries(st.sampled_from(["Location", "X-A"]) | text, text, max_size=3),
    snapshot_body=json_values,
)


@FUZZ
@given(template_values, contexts)
def test_templates_raise_only_template_errors(template: Any, ctx: TemplateContext) -> None:
    with contextlib.suppress(TemplateError):
        render_template(template, ctx)
    with contextlib.suppress(TemplateError):
        render_known(template, ctx)


@FUZZ
@given(templates, contexts)
def test_url_templates_raise_only_template_errors(template: str, ctx: TemplateContext) -> None:
    with contextlib.suppress(TemplateError):
        render_url(template, ctx)


def test_a_deep_value_in_a_template_is_a_template_error() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    ctx = TemplateContext(request_body={"a": deep})
    for render in (render_template, render_url):
        with pytest.raises(TemplateError):
            render("/x/${request.body.a}", ctx)


# --- the rules engine ----------------------------------------------------------------------

EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"


def _example_rules() -> RuleSet:
    doc = load_file(EXAMPLE_CONFIG) or {}
    return parse_rules(
        doc.get("rules"),
        None,
        base_dir=EXAMPLE_CONFIG.parent,
        where=Location(str(EXAMPLE_CONFIG), 0),
    )


RULE_SETS = [
    _example_rules(),
    rule_set(
        {
            "match": {
                "host": ["a.test", "*.b.test", "[::1]:5000"],
                "method": ["POST", "PUT"],
                "path": "/v1/{kind}/**",
                "query": {"page": {"gte": 2}, "q": {"regex": "^x+y$"}},
                "headers": {"x-mode": {"in": ["a", "b"]}},
                "body": {"$.amount": {"gt": 10, "lte": 1e9}, "$.tags[*]": {"contains": "u"}},
            },
            "compensate": {"method": "DELETE", "url": "/v1/{kind}/${response.body.id}"},
        },
        {"match": {"body": {"$..id": {"exists": True}, "$.l[?(@.n > 1)]": {"ne": 3}}}},
        {"match": {"body": {"$": {"eq": None}, "$.a": {"exists": False}}}},
        {"match": {"body": {"$.name": {"regex": "(a|b)*c"}, "$.x": {"in": [1, "1", None]}}}},
        {"match": {"method": "DELETE", "path": "/{a}/{b}"}, "compensate": "none"},
        {
            "match": {"host": "*.test", "method": "PATCH", "path": "/c/{id}"},
            "compensate": "restore",
        },
        {"match": {"path": "/**"}, "action": "hold", "risk": "high"},
    ),
]

bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=100),
    st.integers(1, 2000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 2000).map(lambda n: b'{"id":' * n),
    st.just(b'{"amount": 11, "amount": 1, "tags": ["u"]}'),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]], bytes]:
    """method, url, headers, body: mostly aimed at the rules' hosts, sometimes anywhere."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "MOVE"]) | text)
    host = draw(
        st.sampled_from(["a.test", "x.b.test", "[::1]:5000", "api.github.com", "api.stripe.com"])
        | text
    )
    segments = draw(
        st.lists(
            st.sampled_from(["v1", "c", "..", ".", "%2e%2e", "repos", "issues"]) | text, max_size=5
        )
    )
    query = draw(st.lists(st.tuples(st.sampled_from(["page", "q"]) | text, text), max_size=3))
    url = f"{draw(st.sampled_from(['http', 'https', 'ftp']))}://{host}/" + "/".join(segments)
    if query:
        url += "?" + "&".join(f"{quote_plus(k)}={quote_plus(v)}" for k, v in query)
    if draw(st.booleans()):
        url = draw(text)
    headers = draw(
        st.lists(st.tuples(st.sampled_from(["X-Mode", "Content-Type"]) | text, text), max_size=3)
    )
    return method, url, headers, draw(bodies)


@FUZZ
@given(requests())
def test_the_rules_engine_never_raises(
    request: tuple[str, str, list[tuple[str, str]], bytes],
) -> None:
    method, url, headers, body = request
    try:
        view = RequestView.from_parts(method, url, headers, body)
    except ValueError:
        return  # documented: not an absolute http(s) URL
    for rules in RULE_SETS:
        match = rules.match(view)
        verdicts = rules.explain(view)
        assert (match is not None) == bool(verdicts and verdicts[-1].matched)
        format_explanation(view, verdicts, default_mutations="log")
        if match is not None and isinstance(match.rule.compensate, dict):
            ctx = TemplateContext(
                captures=match.captures,
                request_body=None if view.json is NOT_JSON else view.json,
            )
            with contextlib.suppress(TemplateError):
                render_template(match.rule.compensate, ctx)


# --- the proxy, end to end -------------------------------------------------------------------
#
# Random request lines, headers, content codings and first bytes after CONNECT (plain, or
# inside TLS), sent from a raw socket through a real `undoproxy run` to an upstream that
# records every byte it receives. Whatever the upstream received must be in the journal as a
# judged request (a step with a rule decision that was let through); anything else must not
# have reached it at all (the agent was refused, or is still being waited for).

E2E = settings(
    max_examples=int(os.environ.get("FUZZ_PROXY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FUZZ_RULES = [
    {"name": "fuzz-deny", "match": {"body": {"$.amount": {"gt": 100}}}, "action": "deny"},
    {"name": "fuzz-hold", "match": {"path": "/held/**"}, "action": "hold", "timeout": "1s"},
]


@pytest.fixture(scope="module")
def raw_upstream(upstream_cert: tuple[Path, Path]) -> Iterator[RawUpstream]:
    server = RawUpstream(upstream_cert).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fuzzed_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("fuzz-proxy"), {"rules": FUZZ_RULES}).start()
    yield instance
    instance.stop()


CODINGS = ["gzip", "x-gzip", "gzip, gzip", "deflate", "br", "zstd", "identity", "bz2", "base64"]
ENCODE: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "gzip, gzip": lambda b: gzip.compress(gzip.compress(b)),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "identity": lambda b: b,
    "bz2": bz2.compress,
    "base64": base64.b64encode,
}
tokens = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,10}", fullmatch=True)


@st.composite
def wire_requests(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """(how it travels: plain | tunnel | tls, the bytes sent, the marker in them)."""
    marker = "fz" + draw(st.uuids()).hex
    how = draw(st.sampled_from(["plain", "tunnel", "tls"]))
    method = draw(
        st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "MOVE", "PROPFIND"])
        | tokens
        | st.text(min_size=1, max_size=6)
    )
    segments = draw(
        st.lists(st.sampled_from(["a", "held", "..", "%2e", "x y"]) | tokens, max_size=3)
    )
    path = f"/{marker}/" + "/".join(segments)
    if draw(st.booleans()) and segments and segments[0] == "held":
        path = f"/held/{marker}"
    host = draw(st.sampled_from(["TARGET", "localhost", "127.0.0.1", "", None, "TARGET, x"]))
    amount = draw(st.integers(-5, 500))
    body = draw(
        st.sampled_from([b"", f'{{"amount": {amount}, "m": "{marker}"}}'.encode()])
        | st.binary(max_size=40)
    )
    coding = draw(st.none() | st.sampled_from(CODINGS))
    headers: list[tuple[str, str]] = []
    if host is not None:
        headers.append(("Host", host))
    if coding is not None:
        body = ENCODE[coding](body)
        headers.append(("Content-Encoding", coding))
    chunked = draw(st.booleans()) and bool(body)
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
        sent = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n" if body else b"0\r\n\r\n"
    else:
        length = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1]))
        headers.append(("Content-Length", str(max(length, 0))))
        sent = body
    headers += draw(
        st.lists(st.tuples(tokens | st.sampled_from(["Upgrade", "Expect"]), text), max_size=2)
    )
    target = "http://TARGET" + path if how == "plain" else path
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9"]))
    head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    first = draw(
        st.sampled_from([b"", b"", b"", b"\r\n", b"\n", b" ", b"\x00", b"\x16\x03\x01"])
        | st.binary(max_size=3)
    )
    data = first + head.encode("utf-8", "surrogateescape") + b"\r\n" + sent
    return how, data, marker


def _send(proxy: Undoproxy, upstream: RawUpstream, how: str, data: bytes) -> None:
    target = f"127.0.0.1:{upstream.port}"
    data = data.replace(b"TARGET", target.encode())
    auth = "Proxy-Authorization: Basic " + base64.b64encode(b"fuzz:x").decode() + "\r\n"
    try:
        if how == "plain":
            sock: Any = socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=5)
            first, newline, rest = data.partition(b"\r\n")
            data = first + newline + auth.encode() + rest if newline else data
        else:
            sock = tunnel(
                proxy.proxy_port, target, session="fuzz", tls=how == "tls", ca=proxy.ca_bundle
            )
        with sock:
            sock.settimeout(1.5)
            sock.sendall(data)
            read_answer(sock)
    except (OSError, ConnectionError):
        pass  # refused, reset, or never answered: only what reached the upstream matters


def _journaled(proxy: Undoproxy, marker: str) -> list[tuple[str, str | None]]:
    db = sqlite3.connect(f"file:{proxy.dir / 'journal.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT status, action FROM steps WHERE url LIKE ? OR instr(request_body, ?) > 0",
            (f"%{marker}%", marker.encode()),
        ).fetchall()
    finally:
        db.close()
    return [(str(r[0]), r[1]) for r in rows]


@E2E
@given(wire_requests())
def test_every_request_the_upstream_receives_was_journaled_and_judged(
    fuzzed_proxy: Undoproxy, raw_upstream: RawUpstream, request: tuple[str, bytes, str]
) -> None:
    how, data, marker = request
    _send(fuzzed_proxy, raw_upstream, how, data)
    if marker.encode() not in raw_upstream.received:
        return  # refused, or nothing was forwarded
    deadline = time.monotonic() + 5
    steps = _journaled(fuzzed_proxy, marker)
    while not steps and time.monotonic() < deadline:  # the journal's batch is being written
        time.sleep(0.05)
        steps = _journaled(fuzzed_proxy, marker)
    assert steps, f"reached the upstream unjournaled: {data!r}"
    forwarded = [s for s in steps if s[0] not in ("denied", "held")]
    assert forwarded, f"reached the upstream though journaled as refused: {steps} {data!r}"
    assert all(action is not None for _, action in forwarded), steps
