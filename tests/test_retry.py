"""The retry policy: bounded exponential backoff with jitter, Retry-After honoured."""

from __future__ import annotations

import email.utils
import time

import pytest

from undoproxy.retry import RetryPolicy, parse_retry_after


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 10])
def test_backoff_is_jittered_and_capped(attempt: int) -> None:
    policy = RetryPolicy(base=0.25, cap=4.0)
    delays = [policy.delay(attempt) for _ in range(200)]
    bound = min(4.0, 0.25 * 2 ** (attempt - 1))
    assert all(0 <= d <= bound for d in delays)
    assert len(set(delays)) > 1  # jitter: retries of many clients do not line up


@pytest.mark.parametrize(
    ("header", "expected"),
    [("0", 0.0), ("7", 7.0), (" 3 ", 3.0), ("soon", None), ("", None), (None, None)],
)
def test_retry_after_seconds(header: str | None, expected: float | None) -> None:
    assert parse_retry_after(header) == expected


def test_retry_after_date_and_its_bound() -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 50 < (parse_retry_after(in_a_minute) or 0) <= 60
    assert RetryPolicy(max_retry_after=30).delay(1, in_a_minute) == 30
