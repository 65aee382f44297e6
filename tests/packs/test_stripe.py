"""The stripe pack, as an agent meets it: the stripe SDK through a real `undoproxy run` to a
stateful fake Stripe (form bodies, `deleted: true`, Idempotency-Key replay), then a rollback,
then the fake's state compared with the state before the session. One test per row of the
contract's Stripe table, and a refund retried after undoproxy was killed mid-rollback."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe

from tests.support import fake_stripe
from tests.support.fake_github import pack_config
from tests.support.fake_stripe import API_KEY, StripeState
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def state() -> StripeState:
    return StripeState()


@pytest.fixture(scope="module")
def fake(state: StripeState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = fake_stripe.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, fake: ThreadedServer) -> Iterator[Undoproxy]:
    instance = Undoproxy(
        tmp_path_factory.mktemp("stripe-pack"), pack_config("stripe", fake.port)
    ).start()
    yield instance
    instance.stop()


class Agent:
    """One session's StripeClient, through undoproxy."""

    def __init__(self, up: Undoproxy, fake: ThreadedServer, state: StripeState) -> None:
        self.up, self.fake, self.state = up, fake, state
        self.session = f"st-{uuid.uuid4().hex[:8]}"

    @property
    def client(self) -> stripe.StripeClient:
        return stripe.StripeClient(
            API_KEY,
            base_addresses={"api": self.fake.base_url},
            proxy=self.up.proxy_url(self.session),
            max_network_retries=0,
        )

    def rollback(self) -> dict[str, Any]:
        r = self.up.api("POST", f"/api/sessions/{self.session}/rollback", json={})
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture
def agent(
    up: Undoproxy, fake: ThreadedServer, state: StripeState, monkeypatch: pytest.MonkeyPatch
) -> Agent:
    # stripe-python verifies against its own CA file and ignores the CA variables.
    monkeypatch.setattr(stripe, "ca_bundle_path", up.ca_bundle)
    state.stall_refunds = None
    return Agent(up, fake, state)


def _statuses(report: dict[str, Any]) -> list[str]:
    return [s["status"] for s in report["steps"]]


def _customer(state: StripeState, **fields: Any) -> str:
    """A customer that existed before the session."""
    cid = state.new_id("cus")
    state.objects[cid] = {
        "id": cid,
        "object": "customer",
        "name": "Ada",
        "email": "ada@example.test",
        "description": None,
        "phone": None,
        "address": None,
        "metadata": {"tier": "gold"},
        "created": 1,
        **fields,
    }
    return cid


def test_an_update_is_undone_field_by_field_metadata_included(agent: Agent) -> None:
    cid = _customer(agent.state)
    before = agent.state.dump()
    agent.client.v1.customers.update(
        cid,
        params={
            "name": "Eve",
            "description": "set by the agent",
            "metadata": {"tier": "platinum", "plan": "new key"},
            "address": {"city": "Paris"},
        },
    )
    assert agent.state.objects[cid]["metadata"] == {"tier": "platinum", "plan": "new key"}
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.dump() == before


def test_a_created_customer_is_deleted(agent: Agent) -> None:
    made = agent.client.v1.customers.create(params={"name": "Agent's", "metadata": {"a": "1"}})
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.objects[made.id] == {"id": made.id, "object": "customer", "deleted": True}


@pytest.mark.parametrize("kind", ["products", "prices"])
def test_a_created_product_or_price_is_deactivated(agent: Agent, kind: str) -> None:
    if kind == "products":
        made: Any = agent.client.v1.products.create(params={"name": "Widget"})
    else:
        made = agent.client.v1.prices.create(
            params={"product": "prod_x", "unit_amount": 500, "currency": "eur"}
        )
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.objects[made.id]["active"] is False


def test_a_payment_intent_that_did_not_succeed_is_cancelled(agent: Agent) -> None:
    intent = agent.client.v1.payment_intents.create(params={"amount": 900, "currency": "eur"})
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.objects[intent.id]["status"] == "canceled"
    assert agent.state.refunds == [] or all(
        r["payment_intent"] != intent.id for r in agent.state.refunds
    )


def test_a_payment_intent_that_succeeded_is_refunded(agent: Agent) -> None:
    intent = agent.client.v1.payment_intents.create(
        params={"amount": 900, "currency": "eur", "payment_method": "pm_card", "confirm": True}
    )
    assert intent.status == "succeeded"
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    charge = agent.state.objects[str(intent.latest_charge)]
    assert charge["refunded"] is True
    assert [r["charge"] for r in agent.state.refunds].count(charge["id"]) == 1


def test_a_subscription_is_cancelled_and_a_coupon_deleted(agent: Agent) -> None:
    cid = _customer(agent.state)
    before = agent.state.dump()
    sub = agent.client.v1.subscriptions.create(
        params={"customer": cid, "items": [{"price": "price_x"}]}
    )
    agent.client.v1.coupons.create(params={"percent_off": 20, "duration": "once", "id": "AGENT20"})
    report = agent.rollback()
    assert _statuses(report) == ["compensated", "compensated"], report
    after = agent.state.dump()
    assert after["objects"].pop(sub.id)["status"] == "canceled"
    assert after == before  # the coupon is gone


def test_a_charge_is_held_and_once_approved_is_refunded_once(agent: Agent) -> None:
    call = in_thread(
        lambda: agent.client.v1.charges.create(params={"amount": 1500, "currency": "eur"})
    )
    pending = wait_pending(agent.up, agent.session)
    assert (pending["rule"], pending["risk"]) == ("stripe/create-charge", "high")
    decide(agent.up, pending["id"], "approve")
    charge = call.result(30)
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.objects[charge.id]["refunded"] is True
    keys = [k for k in agent.state.refund_requests[-1:]]
    assert keys and keys[0] is not None and keys[0].startswith("undoproxy-")


HELD: list[Any] = [
    pytest.param(
        lambda a, cid: a.client.v1.customers.delete(cid),
        "stripe/delete-customer",
        "high",
        id="DELETE customer",
    ),
    pytest.param(
        lambda a, cid: a.client.v1.refunds.create(params={"charge": "ch_any"}),
        "stripe/create-refund",
        "critical",
        id="POST refund",
    ),
]


@pytest.mark.parametrize(("act", "rule", "risk"), HELD)
def test_held_rows_denied_change_nothing(
    agent: Agent, act: Callable[[Agent, str], Any], rule: str, risk: str
) -> None:
    cid = _customer(agent.state)
    before = agent.state.dump()
    call = in_thread(lambda: act(agent, cid))
    pending = wait_pending(agent.up, agent.session)
    assert (pending["rule"], pending["risk"]) == (rule, risk)
    decide(agent.up, pending["id"], "deny", reason="no")
    # undoproxy's 403 says {"error": "undoproxy_denied", ...}; stripe-python expects `error` to
    # be an object and fails reading it (AttributeError), but the call is refused all the same.
    with pytest.raises(Exception):  # noqa: B017
        call.result(30)
    steps = agent.up.api("GET", f"/api/sessions/{agent.session}").json()["steps"]
    assert [(s["rule"], s["status"], s["response_status"]) for s in steps] == [
        (rule, "denied", 403)
    ]
    assert agent.state.dump() == before


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("stall", ["after", "before"])
def test_a_refund_retried_after_a_crash_is_never_made_twice(
    tmp_path: Path,
    fake: ThreadedServer,
    state: StripeState,
    monkeypatch: pytest.MonkeyPatch,
    stall: str,
) -> None:
    """undoproxy is killed while the refund is in flight: applied but unanswered ("after"),
    or not yet applied ("before"). Rolled back again after a restart, the charge is refunded
    exactly once: a read shows it refunded, or the same Idempotency-Key is sent again."""
    config = pack_config("stripe", fake.port)
    up = Undoproxy(tmp_path / "up", config).start()
    monkeypatch.setattr(stripe, "ca_bundle_path", up.ca_bundle)
    agent = Agent(up, fake, state)
    intent = agent.client.v1.payment_intents.create(
        params={"amount": 700, "currency": "eur", "payment_method": "pm_card", "confirm": True}
    )
    charge_id = str(intent.latest_charge)
    sent_before = len(state.refund_requests)
    state.release.clear()
    state.stall_refunds = stall
    try:
        in_thread(agent.rollback)  # never answers: undoproxy is killed under it
        _wait_for(lambda: len(state.refund_requests) > sent_before, "the refund was not sent")
        assert up.proc is not None
        up.proc.kill()
        up.proc.wait(10)
        up = Undoproxy(tmp_path / "up", config).start()
        agent.up = up
        if stall == "before":
            # The first refund is still being processed: the retry carries the same key, and
            # Stripe refuses it (409) instead of refunding again.
            report = agent.rollback()
            assert _statuses(report) == ["failed"], report
            assert "idempotency_key_in_use" in report["steps"][0]["detail"]
        state.release.set()
        _wait_for(
            lambda: state.keys.get(state.refund_requests[sent_before] or "") is not None,
            "the first refund did not finish",
        )
        report = agent.rollback()
        assert _statuses(report) == ["compensated"], report
        assert report["state"] == "rolled_back"
    finally:
        state.stall_refunds = None
        state.release.set()
        up.stop()
    refunds = [r for r in state.refunds if r["charge"] == charge_id]
    assert len(refunds) == 1
    keys = set(state.refund_requests[sent_before:])
    assert len(keys) == 1 and next(iter(keys), "").startswith("undoproxy-")  # type: ignore[union-attr]


def test_the_stripe_sdk_reads_the_fake_directly(
    fake: ThreadedServer, monkeypatch: pytest.MonkeyPatch, upstream_cert: tuple[Path, Path]
) -> None:
    """The fake is one stripe-python can parse: the same calls without undoproxy."""
    monkeypatch.setattr(stripe, "ca_bundle_path", str(upstream_cert[0]))
    client = stripe.StripeClient(
        API_KEY, base_addresses={"api": fake.base_url}, max_network_retries=0
    )
    made = client.v1.customers.create(params={"name": "x", "metadata": {"k": "v"}})
    assert client.v1.customers.retrieve(made.id).metadata["k"] == "v"
    deleted = client.v1.customers.delete(made.id)
    assert deleted.deleted is True
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.charges.retrieve("ch_nothing")
    assert missing.value.code == "resource_missing"
