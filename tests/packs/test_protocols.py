"""The graphql, mcp, search and email packs through a real `undoproxy run`.

Real HTTP clients (requests; SendGrid's own SDK for email) call a fake of each protocol
(tests/support/protocols.py). `defaults.mutations: hold` holds every mutation, so a read that
comes straight back was recognised by its pack; a mutation a pack recognises is still held
(packs name what a request is and how to undo it; the defaults say whether it may go).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import sendgrid
from sendgrid.helpers.mail import Mail

from tests.support import protocols
from tests.support.certs import self_signed, server_context
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def recorded(step: dict[str, Any]) -> dict[str, Any]:
    """What the rule's `record:` kept: the step's meta without what undoproxy keeps of every
    streamed answer (`stream`) and of every MCP exchange (`mcp`)."""
    return {k: v for k, v in (step["meta"] or {}).items() if k not in ("stream", "mcp")}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    ctx = server_context(self_signed(tmp_path_factory.mktemp("protocols-cert")))
    server = ThreadedServer(protocols.create_app(), ctx).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, fake: ThreadedServer) -> Iterator[Undoproxy]:
    config = {
        "defaults": {"mutations": "hold"},
        "approvals": {"timeout": "60s"},
        "packs": [
            "graphql",
            "mcp",
            "search",
            {"name": "email", "hosts": [f"127.0.0.1:{fake.port}"]},
        ],
    }
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-protocols"), config).start()
    yield instance
    instance.stop()


@pytest.fixture
def session() -> str:
    return f"proto-{uuid.uuid4().hex[:10]}"


FRAGMENT_FIRST = """
# the agent's saved query
fragment who on User { login name(format: "{not a brace}") }
query Viewer { viewer { ...who } }
"""


@pytest.mark.parametrize(
    ("body", "operation"),
    [
        ({"query": FRAGMENT_FIRST}, "Viewer"),
        ({"query": "{ viewer { login } }"}, None),
        ({"query": "subscription OnIssue { issue { id } }"}, "OnIssue"),
        ({"query": "query A { a } mutation B { b }", "operationName": "A"}, "A"),
    ],
    ids=["comment-and-fragment-first", "shorthand", "subscription", "operation-name"],
)
def test_graphql_queries_are_reads(
    proxy: Undoproxy, fake: ThreadedServer, session: str, body: dict[str, Any], operation: str
) -> None:
    with proxy.agent(session) as s:
        r = s.post(f"{fake.base_url}/graphql", json=body, timeout=30)
    assert r.status_code == 200
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"], step["status"]) == ("read", "graphql/query", "succeeded")
    assert step["meta"].get("operation") == operation
    assert proxy.rollback(session)["steps"] == []


def test_a_graphql_mutation_is_an_irreversible_mutation(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    query = "# create it\nmutation CreateIssue($t: String!) { createIssue(title: $t) { id } }"
    with proxy.agent(session) as s:
        r = _approved(
            proxy,
            session,
            lambda: s.post(f"{fake.base_url}/api/graphql", json={"query": query}, timeout=60),
        )
    assert r.json() == {"data": {"ran": "anonymous"}}
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"], step["status"]) == (
        "mutation",
        "graphql/mutation",
        "succeeded",
    )
    assert recorded(step) == {"operation": "CreateIssue", "operation_type": "mutation"}
    report = proxy.rollback(session)
    [entry] = report["steps"]
    assert entry["status"] == "irreversible"
    assert "GraphQL mutation has no generic inverse" in entry["detail"]
    assert "CreateIssue" in entry["detail"]


@pytest.mark.parametrize(
    ("method", "query", "body"),
    [
        ("POST", "mutation Drop { drop }", None),
        ("POST", "mutation Drop { drop }", {"query": "{ viewer { login } }"}),
        ("POST", "{ viewer { login } }", {"query": "mutation Drop { drop }"}),
        ("GET", "mutation Drop { drop }", None),
    ],
    ids=["post-url-only", "post-url-mutation-body-query", "post-body-mutation-url-query", "get"],
)
def test_a_graphql_mutation_in_the_url_is_a_mutation(
    proxy: Undoproxy,
    fake: ThreadedServer,
    session: str,
    method: str,
    query: str,
    body: dict[str, Any] | None,
) -> None:
    """GraphQL over HTTP reads `?query=` (GET, and POST on many servers): a mutation there, or
    anywhere, makes the request a mutation, held here by defaults.mutations: hold."""
    with proxy.agent(session) as s:
        answer = in_thread(
            lambda: s.request(
                method, f"{fake.base_url}/graphql", params={"query": query}, json=body, timeout=60
            )
        )
        approval = wait_pending(proxy, session)
        assert approval["rule"] == "graphql/mutation"
        assert decide(proxy, approval["id"], "deny").status_code == 200
        assert answer.result(30).status_code == 403
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"], step["status"]) == (
        "mutation",
        "graphql/mutation",
        "denied",
    )


def test_a_graphql_query_in_the_url_is_a_read(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    with proxy.agent(session) as s:
        r = s.get(f"{fake.base_url}/graphql", params={"query": "query Me { viewer { id } }"})
    assert r.status_code == 200
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", "graphql/query")
    assert step["meta"] == {"operation": "Me", "operation_type": "query"}


def _approved(proxy: Undoproxy, session: str, send: Any) -> Any:
    """Send a mutation, see it held (a pack rule names no action: defaults.mutations holds it),
    approve it, and return its answer."""
    answer = in_thread(send)
    approval = wait_pending(proxy, session)
    assert decide(proxy, approval["id"], "approve").status_code == 200
    return answer.result(30)


def _rpc(method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> Any:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    if not notify:
        body["id"] = 1
    return body


@pytest.mark.parametrize(
    "body",
    [
        _rpc("initialize", {"protocolVersion": "2025-03-26", "capabilities": {}}),
        _rpc("notifications/initialized", notify=True),
        _rpc("tools/list"),
        _rpc("resources/read", {"uri": "file:///a"}),
        _rpc("prompts/get", {"name": "p"}),
        _rpc("ping"),
    ],
    ids=lambda b: b["method"],
)
def test_mcp_listing_and_reading_are_reads(
    proxy: Undoproxy, fake: ThreadedServer, session: str, body: dict[str, Any]
) -> None:
    with proxy.agent(session) as s:
        r = s.post(f"{fake.base_url}/mcp", json=body, timeout=30)
    assert r.status_code in (200, 202)
    [step] = proxy.steps(session)
    assert step["kind"] == "read"
    assert step["rule"] in ("mcp/read", "mcp/notification")
    assert recorded(step) == {"method": body["method"]}


def test_an_mcp_tool_call_is_an_irreversible_mutation_naming_the_tool(
    proxy: Undoproxy, fake: ThreadedServer, session: str
) -> None:
    call = _rpc("tools/call", {"name": "delete_file", "arguments": {"path": "/tmp/x"}})
    with proxy.agent(session) as s:
        r = _approved(proxy, session, lambda: s.post(f"{fake.base_url}/mcp", json=call, timeout=60))
    assert r.json()["result"]["isError"] is False
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("mutation", "mcp/tool-call")
    assert recorded(step) == {"method": "tools/call", "tool": "delete_file"}
    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "irreversible"
    assert "tool: delete_file" in entry["detail"]


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/logs-2026/_search", "search/search"),
        ("/_msearch", "search/msearch"),
        ("/logs/_count", "search/count"),
        ("/logs/_mget", "search/mget"),
        ("/logs/_field_caps", "search/field-caps"),
        ("/logs/_validate/query", "search/validate-query"),
    ],
)
def test_search_posts_are_reads(
    proxy: Undoproxy, fake: ThreadedServer, session: str, path: str, rule: str
) -> None:
    with proxy.agent(session) as s:
        r = s.post(f"{fake.base_url}{path}", json={"query": {"match_all": {}}}, timeout=30)
    assert r.status_code == 200
    [step] = proxy.steps(session)
    assert (step["kind"], step["rule"]) == ("read", rule)


def _send_email(fake: ThreadedServer) -> Any:
    """Send an email with SendGrid's SDK; its HTTP status (or what it raised instead)."""
    client = sendgrid.SendGridAPIClient(api_key="SG.test", host=fake.base_url)
    message = Mail(
        from_email="agent@example.com",
        to_emails=["ana@example.com", "bo@example.com"],
        subject="Quarterly numbers",
        plain_text_content="see attached",
    )
    try:
        return client.send(message).status_code
    except Exception as exc:  # python-http-client raises HTTPError subclasses with .status_code
        return getattr(exc, "status_code", repr(exc))


def _held_email(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Future[Any], dict[str, Any]]:
    """The agent sending an email in a thread (its future status), and the approval holding it."""
    # SendGrid's client is urllib underneath: it reads the proxy and CA from the environment.
    monkeypatch.setenv("HTTPS_PROXY", proxy.proxy_url(session))
    monkeypatch.setenv("SSL_CERT_FILE", proxy.ca_bundle)
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    status = in_thread(lambda: _send_email(fake))
    return status, wait_pending(proxy, session, timeout=30)


def test_an_email_is_held_then_irreversible_naming_recipients_and_subject(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, approval = _held_email(proxy, fake, session, monkeypatch)
    assert approval["rule"] == "email/sendgrid"
    assert decide(proxy, approval["id"], "approve").status_code == 200
    assert status.result(30) == 202
    [step] = proxy.steps(session)
    assert (step["kind"], step["risk"], step["status"]) == ("mutation", "high", "succeeded")
    assert recorded(step) == {
        "to": ["ana@example.com", "bo@example.com"],
        "subject": "Quarterly numbers",
    }
    report = proxy.rollback(session)
    [entry] = report["steps"]
    assert entry["status"] == "irreversible"
    assert "an email cannot be unsent" in entry["detail"]
    assert "ana@example.com, bo@example.com" in entry["detail"]
    assert '"Quarterly numbers"' in entry["detail"]
    assert "usage" not in entry["detail"]


def test_a_denied_email_is_never_sent(
    proxy: Undoproxy, fake: ThreadedServer, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = len(fake.app[protocols.RECEIVED])
    status, approval = _held_email(proxy, fake, session, monkeypatch)
    assert decide(proxy, approval["id"], "deny", reason="no").status_code == 200
    assert status.result(30) == 403
    assert len(fake.app[protocols.RECEIVED]) == before
