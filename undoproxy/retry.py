"""Retries with exponential backoff and full jitter, honouring Retry-After (bounded)."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a safe request is retried."""

    attempts: int = 4
    base: float = 0.25
    cap: float = 4.0
    max_retry_after: float = 30.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before attempt number `attempt + 1` (attempt counts from 1)."""
        hinted = parse_retry_after(retry_after)
        if hinted is not None:
            return min(hinted, self.max_retry_after)
        return random.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1)))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
