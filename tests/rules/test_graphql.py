"""Which GraphQL operation a request body runs: one request, or a batch (a flat list of
requests, the strongest operation wins); anything else is not a GraphQL request, however
deeply it nests (the fuzzer once found a list of lists deep enough to exhaust the stack)."""

from __future__ import annotations

from typing import Any

from undoproxy.rules.graphql import Operation, operation_of


def test_one_request_and_a_batch() -> None:
    assert operation_of({"query": "query Me { me { id } }"}) == Operation("query", "Me")
    batch = [{"query": "query A { a }"}, {"query": "mutation B { b }"}]
    assert operation_of(batch) == Operation("mutation", None)  # the strongest, of several
    assert operation_of([{"query": "mutation B { b }"}]) == Operation("mutation", "B")


def test_a_list_inside_a_batch_is_not_a_request() -> None:
    assert operation_of([[{"query": "mutation B { b }"}]]) is None
    assert operation_of([{"query": "query A { a }"}, [{"query": "mutation B { b }"}]]) is None


def test_lists_nested_past_the_stack_are_not_a_request() -> None:
    deep: Any = [{"query": "mutation B { b }"}]
    for _ in range(100_000):
        deep = [deep]
    assert operation_of(deep) is None
