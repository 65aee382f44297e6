"""Webhooks for `approvals.notify`: Slack-compatible JSON (`{"text": ...}`) when a request is held.

The text is Slack mrkdwn, in which `&`, `<` and `>` are control characters: `<!channel>`
notifies everyone, `<http://evil|click here>` is a link whose text hides where it goes,
`<@U123>` a mention. Slack's "Escaping text" (api.slack.com, formatting reference) says to
write them as `&amp;`, `&lt;` and `&gt;` and nothing else; `slack_text` does that to every
piece of outside text put in a message (session ids, URLs, rule names, reasons), so it shows
as written. `slack_code` also keeps a value inside its code span (`` `...` ``), which Slack
has no escape for: a backtick in the value becomes `'`.

Delivery runs in background tasks: retried with backoff on connection errors, 429 and 5xx, at
most MAX_PENDING deliveries at a time (more are dropped and logged). A failing webhook never
delays, forwards or denies anything; it only logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from undoproxy.retry import RETRY_STATUSES, RetryPolicy

log = logging.getLogger(__name__)
WEBHOOK_RETRY = RetryPolicy(attempts=4, base=0.5, cap=4.0, max_retry_after=10.0)
TIMEOUT = 5.0
MAX_PENDING = 100


_SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def slack_text(value: object) -> str:
    """`value` as literal text in a Slack message: `&`, `<`, `>` escaped as Slack says."""
    return str(value).translate(_SLACK_ESCAPES)


def slack_code(value: object) -> str:
    """`value` as a Slack code span, `` `value` ``, that it cannot close or turn into markup."""
    return "`" + slack_text(value).replace("`", "'") + "`"


class Webhooks:
    """Posts `{"text": ...}` to every configured URL without ever blocking the caller."""

    def __init__(
        self, urls: list[str], *, policy: RetryPolicy = WEBHOOK_RETRY, timeout: float = TIMEOUT
    ) -> None:
        self.urls = list(urls)
        self.policy = policy
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, text: str) -> None:
        """Queue one message to every URL (call from the running loop)."""
        for url in self.urls:
            if len(self._tasks) >= MAX_PENDING:
                log.warning(
                    "webhook %s skipped: %d deliveries already pending", _where(url), MAX_PENDING
                )
                continue
            task = asyncio.get_running_loop().create_task(
                self._deliver(url, {"text": text}), name="undoproxy-webhook"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env=False: never send our own webhooks through a proxy from the environment.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout), trust_env=False
            )
        return self._session

    async def _deliver(self, url: str, payload: dict[str, Any]) -> None:
        problem = ""
        for attempt in range(1, self.policy.attempts + 1):
            retry_after = None
            try:
                async with self._client().post(url, json=payload) as response:
                    if 200 <= response.status < 300:
                        return
                    problem = f"HTTP {response.status}"
                    if response.status not in RETRY_STATUSES:
                        break
                    retry_after = response.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                problem = str(exc) or type(exc).__name__
            if attempt < self.policy.attempts:
                await asyncio.sleep(self.policy.delay(attempt, retry_after))
        log.warning("webhook %s failed: %s", _where(url), problem)

    async def flush(self) -> None:
        """Wait for the deliveries under way (tests, shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop the deliveries under way and close the HTTP client."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()


def _where(url: str) -> str:
    """A webhook URL for the log: its host only (Slack-style URLs carry a secret in the path)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}/..."
