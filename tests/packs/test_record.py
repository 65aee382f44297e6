"""`record:` and `match.graphql` as pure code: GraphQL operations, forms, streams, bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from undoproxy.proxy.streaming import KEEP_BYTES, StreamTail
from undoproxy.rules.graphql import Operation, operation_of, operation_of_request
from undoproxy.rules.record import Record, RecordEntry, request_fields, stream_events


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"query": "{ viewer { login } }"}, Operation("query")),
        ({"query": "query Q { a }"}, Operation("query", "Q")),
        ({"query": "mutation M($x: Int) @d { a(x: $x) }"}, Operation("mutation", "M")),
        ({"query": "subscription { a }"}, Operation("subscription")),
        (
            {"query": '# mutation here\nfragment F on T { a(s: "} mutation {") }\nquery { ...F }'},
            Operation("query"),
        ),
        ({"query": '"""block } string"""\nquery Q { a }'}, None),  # descriptions are not executable
        (
            {"query": "query A { a } mutation B { b }", "operationName": "B"},
            Operation("mutation", "B"),
        ),
        ({"query": "query A { a } mutation B { b }"}, Operation("mutation", "B")),
        ({"query": "query A { a }", "operationName": "Missing"}, None),
        ([{"query": "{ a }"}, {"query": "mutation { b }"}], Operation("mutation")),
        ({"query": 42}, None),
        ("not graphql", None),
    ],
)
def test_graphql_operation(body: Any, expected: Operation | None) -> None:
    assert operation_of(body) == expected


M, Q = Operation("mutation"), Operation("query")


@pytest.mark.parametrize(
    ("body", "raw", "query", "expected"),
    [
        # The URL alone (GET, or POST with an empty body).
        (None, b"", [("query", "mutation { b }")], M),
        (None, b"", [("query", "query A { a }"), ("operationName", "A")], Operation("query", "A")),
        # Body and URL: the stricter wins, whichever carries the mutation.
        ({"query": "{ a }"}, b"", [("query", "mutation { b }")], M),
        ({"query": "mutation { b }"}, b"", [("query", "{ a }")], M),
        ({"query": "{ a }"}, b"", [("query", "{ b }")], Q),
        ({"query": "{ a }"}, b"", [("query", "{ b }"), ("query", "mutation { c }")], M),
        # Something unreadable where an operation may be: no reading at all.
        ({"query": "{ a }"}, b"", [("query", "not graphql")], None),
        ({"variables": {}}, b"", [("query", "{ a }")], None),
        # Bodies that are not JSON: the document itself, or a form.
        (None, b"mutation { b }", [], M),
        (
            None,
            b"query=mutation%20X%7Bb%7D&operationName=X",
            [("query", "{ a }")],
            Operation("mutation", "X"),
        ),
        (None, b"query=mutation{b}", [], M),
        (None, b"\xff\xfe", [("query", "{ a }")], None),
        (None, b"   ", [("query", "{ a }")], Q),
        (None, b"", [("variables", "{}")], None),
    ],
    ids=[
        "url-mutation",
        "url-named-query",
        "body-query-url-mutation",
        "body-mutation-url-query",
        "both-queries",
        "one-of-two-url-documents",
        "url-unreadable",
        "body-without-query",
        "raw-document",
        "form-body",
        "unencoded-form",
        "undecodable-body",
        "blank-body",
        "nothing",
    ],
)
def test_graphql_operation_of_request(
    body: Any, raw: bytes, query: list[tuple[str, str]], expected: Operation | None
) -> None:
    assert operation_of_request(body, raw, query) == expected


def test_forms_are_read_as_fields() -> None:
    urlencoded = b"to=ana%40example.com&to=bo%40example.com&subject=Hi+there"
    assert request_fields(urlencoded, "application/x-www-form-urlencoded") == {
        "to": ["ana@example.com", "bo@example.com"],
        "subject": "Hi there",
    }
    multipart = (
        b'--XyZ\r\nContent-Disposition: form-data; name="to"\r\n\r\nana@example.com\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="subject"\r\n\r\nHi\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="attachment"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nsecret file\r\n--XyZ--\r\n"
    )
    assert request_fields(multipart, "multipart/form-data; boundary=XyZ") == {
        "to": "ana@example.com",
        "subject": "Hi",
    }
    assert request_fields(b'{"a": 1}', None) == {"a": 1}
    assert request_fields(b"", "application/json") is None


def test_stream_events_read_sse_and_ndjson() -> None:
    sse = b'event: x\ndata: {"a": 1}\n\ndata: [DONE]\n\n: comment\n\ndata: {"b":\ndata: 2}\n\n'
    assert stream_events(sse) == [{"a": 1}, {"b": 2}]
    assert stream_events(b'{"a": 1}\n{"done": true}\n') == [{"a": 1}, {"done": True}]


def test_later_values_win_and_objects_merge() -> None:
    record = Record(
        (
            RecordEntry("model", ("${request.body.model}", "${response.body.model}")),
            RecordEntry("usage", ("${response.body.message.usage}", "${response.body.usage}")),
            RecordEntry("missing", ("${response.body.nothing}",)),
        )
    )
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 25, "output_tokens": 1}}},
        {"type": "content_block_delta"},
        {"type": "message_delta", "usage": {"output_tokens": 9}},
    ]
    meta = record.evaluate(captures={}, request_body={"model": "m"}, response_docs=events)
    assert meta == {"model": "m", "usage": {"input_tokens": 25, "output_tokens": 9}}
    assert record.evaluate(captures={}, request_body={"model": "m"}, request_only=True) == {
        "model": "m"
    }


def test_a_stream_tail_keeps_bounded_memory_and_the_final_event() -> None:
    tail = StreamTail()
    first = b'data: {"type": "start", "model": "m"}\n\n'
    assert tail(first) == first
    for i in range(20_000):  # about 1 MB of events passes through
        chunk = f"data: {json.dumps({'n': i, 'pad': 'x' * 20})}\n\n".encode()
        assert tail(chunk) == chunk
    tail(b'data: {"usage": {"total": 3}}\n\ndata: [DONE]\n\n')
    assert len(tail.head) <= KEEP_BYTES
    assert tail.tail_size <= 2 * KEEP_BYTES
    events = tail.events()
    assert events[0] == {"type": "start", "model": "m"}
    assert events[-1] == {"usage": {"total": 3}}


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_compressed_stream_is_decoded_in_bounded_pieces(encoding: str) -> None:
    import zlib

    import brotli  # type: ignore[import-untyped]
    import zstandard

    events = b"".join(f"data: {json.dumps({'n': i})}\n\n".encode() for i in range(5000))
    events += b'data: {"usage": {"total": 7}}\n\ndata: [DONE]\n\n'
    packed = {
        "gzip": lambda b: zlib.compress(b, wbits=31),
        "deflate": zlib.compress,
        "br": brotli.compress,
        "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    }[encoding](events)
    tail = StreamTail(keep=4096, encoding=encoding)
    for i in range(0, len(packed), 1000):
        chunk = packed[i : i + 1000]
        assert tail(chunk) == chunk  # passed on as sent
    assert len(tail.head) <= 4096 and tail.tail_size <= 3 * 4096
    decoded = tail.events()
    assert decoded[0] == {"n": 0} and decoded[-1] == {"usage": {"total": 7}}


def test_an_unknown_encoding_keeps_nothing_and_passes_everything() -> None:
    tail = StreamTail(encoding="gzip, br")
    assert tail(b"\x00\x01") == b"\x00\x01"
    assert tail.events() == []
