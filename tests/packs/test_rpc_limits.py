"""Each RPC pack's limit on what one write may touch and still be undone: a number in one
place, undone at the limit, irreversible one past it (pure: builders on Facts, no network)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from undoproxy.compensators import awsservices as aws
from undoproxy.compensators import chroma, datasette, dynamodb, etcd, postgrest
from undoproxy.compensators.model import Facts, Irreversible, Snapshot


def _facts(method: str, url: str, body: Any, headers: dict[str, str] | None = None) -> Facts:
    return Facts(method, url, request_body=json.dumps(body).encode(), request_headers=headers or {})


def dynamo(n: int) -> Facts:
    items = [{"Put": {"TableName": "t", "Item": {"id": {"S": str(i)}}}} for i in range(n)]
    target = {"x-amz-target": "DynamoDB_20120810.TransactWriteItems"}
    return _facts("POST", "https://dynamodb.test/", {"TransactItems": items}, target)


def ssm(n: int) -> Facts:
    target = {"x-amz-target": "AmazonSSM.DeleteParameters"}
    return _facts("POST", "https://ssm.test/", {"Names": [f"/p{i}" for i in range(n)]}, target)


def chroma_ids(n: int) -> Facts:
    url = "http://c.test/api/v2/tenants/t/databases/d/collections/x/delete"
    return _facts("POST", url, {"ids": [str(i) for i in range(n)]})


def datasette_rows(n: int) -> Facts:
    f = _facts("POST", "http://d.test/db/notes/-/upsert", {"rows": [{"id": i} for i in range(n)]})
    f.reads["table"] = Snapshot("u", 200, json.dumps({"primary_keys": ["id"]}).encode())
    return f


def postgrest_rows(n: int) -> Facts:
    f = _facts("POST", "http://p.test/notes", [{"id": i} for i in range(n)])
    schema = {"definitions": {"notes": {"properties": {"id": {"description": "<pk/>"}}}}}
    f.reads["openapi"] = Snapshot("u", 200, json.dumps(schema).encode())
    return f


def etcd_range(n: int) -> Facts:
    f = _facts("POST", "http://e.test/v3/kv/deleterange", {"key": "YQ==", "range_end": "Yg=="})
    kvs = [{"key": f"k{i}", "value": "v"} for i in range(n)]
    f.reads["range YQ== Yg=="] = Snapshot("u", 200, json.dumps({"kvs": kvs}).encode())
    return f


CASES: list[tuple[str, int, Callable[[int], Facts], Callable[[Facts], Any]]] = [
    ("dynamodb items", dynamodb.MAX_ITEMS, dynamo, dynamodb.reads),
    ("ssm names", aws.MAX_NAMES, ssm, aws.parameter_reads),
    ("chroma records", chroma.MAX_RECORDS, chroma_ids, chroma.record_reads),
    ("datasette rows", datasette.MAX_ROWS, datasette_rows, datasette.reads),
    ("postgrest rows", postgrest.MAX_ROWS, postgrest_rows, postgrest.reads),
    ("etcd keys", etcd.MAX_KEYS, etcd_range, lambda f: etcd._before(f, ("YQ==", "Yg=="))),
]


@pytest.mark.parametrize(("what", "limit", "make", "reads"), CASES, ids=[c[0] for c in CASES])
def test_at_the_limit_it_is_read_and_one_past_it_is_irreversible(
    what: str, limit: int, make: Callable[[int], Facts], reads: Callable[[Facts], Any]
) -> None:
    assert reads(make(limit))  # read (or undone) at the limit
    with pytest.raises(Irreversible, match=str(limit)):
        reads(make(limit + 1))
