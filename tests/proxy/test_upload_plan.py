"""How a large upload is judged (proxy/upload_plan.py): on its headers when nothing in its
judgment needs its body or a person; spooled otherwise, and always over HTTP/2 and HTTP/3,
whose connections carry the agent's other requests (pausing one would stall them).

The planner is driven with mitmproxy's own test flows; the proxy server it pauses
connections of has none here (what pausing does to a live connection is tested end to end in
tests/proxy/test_judged_uploads.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from mitmproxy import http
from mitmproxy.test import tflow

from undoproxy.proxy.upload_plan import PLAN, STREAM, UploadPlanner, streams


def _flow(version: str) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.request.method = "PUT"
    flow.request.http_version = version
    return flow


def _plan(flow: http.HTTPFlow, *reasons: object) -> str:
    planner = UploadPlanner(SimpleNamespace(connections={}), reasons)  # type: ignore[arg-type]
    asyncio.run(planner.undoproxy_upload_plan(flow))
    return str(flow.metadata[PLAN])


def test_an_http1_upload_nothing_objects_to_is_streamed() -> None:
    flow = _flow("HTTP/1.1")
    assert _plan(flow, lambda f: None) == STREAM
    assert streams(flow)


@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/3"])
def test_a_multiplexed_upload_is_spooled(version: str) -> None:
    flow = _flow(version)
    assert "other requests" in _plan(flow, lambda f: None)
    assert not streams(flow)


def test_the_first_objection_is_the_reason() -> None:
    flow = _flow("HTTP/1.1")
    said = _plan(flow, lambda f: None, lambda f: "the rules would hold it", lambda f: "later")
    assert said == "the rules would hold it"
    assert not streams(flow)


def test_a_fault_while_deciding_spools_it() -> None:
    def boom(flow: http.HTTPFlow) -> str | None:
        raise RuntimeError("injected fault")

    flow = _flow("HTTP/1.1")
    assert "could not plan it (RuntimeError)" in _plan(flow, boom)
    assert not streams(flow)
