"""undoproxy's own reads of a mutation's target, around it: what a snapshot before it and a
read right after it share (retries where safe, the session's secrets, body files for large
targets, and one error for every way a read fails)."""

from __future__ import annotations

from mitmproxy import http

from undoproxy.limits import SNAPSHOT_IN_JOURNAL
from undoproxy.proxy.state import state_of
from undoproxy.retry import RetryPolicy
from undoproxy.upstream import BodyTooLarge, Spill, UpstreamClient, UpstreamError, UpstreamResponse

SNAPSHOT_RETRY = RetryPolicy(attempts=3, base=0.1, cap=1.0, max_retry_after=5.0)
SNAPSHOT_LIMIT = SNAPSHOT_IN_JOURNAL  # a larger target is kept in a body file, or refused


class SnapshotFailed(Exception):
    """The target could not be read before the mutation; `challenge` is the upstream's
    `WWW-Authenticate` when it asked for credentials the agent did not send."""

    def __init__(self, message: str, challenge: str | None = None) -> None:
        super().__init__(message)
        self.challenge = challenge


async def read_target(
    client: UpstreamClient,
    flow: http.HTTPFlow,
    url: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    *,
    keep: int = SNAPSHOT_LIMIT,
    need_all: bool = True,
    spill: Spill | None = None,
) -> UpstreamResponse:
    """One read of undoproxy's own, retried where safe; SnapshotFailed when it fails."""
    state = state_of(flow)
    try:
        return await client.send_with_retries(
            method,
            url,
            SNAPSHOT_RETRY,
            headers,
            body or None,
            keep=keep,
            need_all=need_all,
            session=state.session_id if state is not None else None,
            spill=spill,
        )
    except UpstreamError as exc:
        raise SnapshotFailed(str(exc)) from None
    except BodyTooLarge:
        limit = spill.limit if spill is not None else keep
        raise SnapshotFailed(
            f"the target is larger than {limit} bytes"
            + (" (proxy.max_body)" if spill is not None else "")
        ) from None
    except OSError as exc:  # the body file could not be written
        raise SnapshotFailed(f"the target could not be kept on disk: {exc}") from None
