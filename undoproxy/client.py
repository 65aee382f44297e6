"""The CLI's client for a running undoproxy's admin API (stdlib only, synchronous)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from undoproxy.errors import AdminClientError

DEFAULT_ADMIN = "http://127.0.0.1:8081"
ADMIN_ENV = "UNDOPROXY_ADMIN"
TOKEN_ENV = "UNDOPROXY_ADMIN_TOKEN"
STATE_DIR_ENV = "UNDOPROXY_STATE_DIR"

# Never through a proxy: in a shell where `undoproxy env` was eval'd, urllib would send the
# CLI's own admin calls (and the admin token) through undoproxy, journaled as the session's
# steps, and a rollback would try to undo the rollback request itself.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ByteSink(Protocol):
    """Where `download` writes: a binary file, or anything that takes bytes."""

    def write(self, data: bytes, /) -> object:
        """Take the next bytes."""
        ...


ADMIN_URL_FILE = "admin-url"  # in the state dir: the admin URL of the undoproxy running there
TOKEN_FILE = "admin-token"  # in the state dir: the token `undoproxy run` generated


def default_state_dir() -> Path:
    """UNDOPROXY_STATE_DIR, else ~/.undoproxy: where the CLI looks when given no config."""
    return Path(os.environ.get(STATE_DIR_ENV) or "~/.undoproxy").expanduser()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def running_admin_url(state_dir: Path) -> str | None:
    """The admin URL `undoproxy run` wrote into `state_dir` while it runs, if any."""
    return _read(state_dir / ADMIN_URL_FILE)


def listen_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server listening on host:port (an
    any-address listener is reached on loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def find_token(state_dir: Path | None = None) -> str | None:
    """UNDOPROXY_ADMIN_TOKEN, else the token `undoproxy run` generated in the state dir."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token.strip()
    return _read((state_dir or default_state_dir()) / TOKEN_FILE)


def find_admin_url(state_dir: Path | None = None) -> str:
    """UNDOPROXY_ADMIN, else the running undoproxy's URL from the state dir, else the default."""
    return (
        os.environ.get(ADMIN_ENV)
        or running_admin_url(state_dir or default_state_dir())
        or DEFAULT_ADMIN
    )


class AdminClient:
    """Calls the admin API; every failure becomes an AdminClientError a user can act on."""

    def __init__(
        self, base_url: str | None = None, token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.base_url = (base_url or find_admin_url()).rstrip("/")
        self.token = token if token is not None else find_token()
        self.timeout = timeout

    def stream(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Send one request and yield each JSON line of the answer as it arrives."""
        request = self._request(method, path, body)
        request.add_header("Accept", "application/x-ndjson")
        try:
            with _DIRECT.open(request, timeout=None) as response:
                for line in response:
                    if line.strip():
                        yield json.loads(line)
        except urllib.error.HTTPError as exc:
            raise AdminClientError(self._explain(exc)) from None
        except urllib.error.URLError as exc:
            raise AdminClientError(self._unreachable(exc)) from None

    def pages(
        self, path: str, key: str, *, limit: int | None = None, page: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """Follow a paged list (`GET path`, its items under `key`, `next` the cursor of the
        next page) and yield its items, at most `limit` of them; `self.total` is then the
        list's total."""
        joiner = "&" if "?" in path else "?"
        cursor: str | None = None
        left = limit
        while True:
            size = page if left is None else max(1, min(page, left))
            query = f"{joiner}limit={size}" + (f"&cursor={quote(cursor)}" if cursor else "")
            answer = self.call("GET", path + query)
            self.total = int(answer.get("total", 0))
            for item in answer[key]:
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield item
            cursor = answer.get("next")
            if not cursor or (left is not None and left <= 0):
                return

    total = 0  # the total of the list `pages` followed last

    def download(self, path: str, sink: ByteSink) -> bytes:
        """`GET path` written to `sink` as it arrives (nothing held in memory); the last
        byte written (b"" when none)."""
        request = self._request("GET", path, None)
        last = b""
        try:
            with _DIRECT.open(request, timeout=self.timeout) as response:
                while chunk := response.read(64 * 1024):
                    sink.write(chunk)
                    last = chunk[-1:]
        except urllib.error.HTTPError as exc:
            raise AdminClientError(self._explain(exc)) from None
        except urllib.error.URLError as exc:
            raise AdminClientError(self._unreachable(exc)) from None
        except TimeoutError:
            raise AdminClientError(f"undoproxy at {self.base_url} did not answer in time") from None
        return last

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> urllib.request.Request:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        return request

    def _unreachable(self, exc: urllib.error.URLError) -> str:
        return (
            f"undoproxy is not running at {self.base_url} ({exc.reason}); start it with "
            f"`undoproxy run`, or point --admin / {ADMIN_ENV} at it"
        )

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        raw: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer (or text with raw=True)."""
        request = self._request(method, path, body)
        try:
            with _DIRECT.open(request, timeout=timeout or self.timeout) as response:
                text = response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            raise AdminClientError(self._explain(exc)) from None
        except urllib.error.URLError as exc:
            raise AdminClientError(self._unreachable(exc)) from None
        except TimeoutError:
            raise AdminClientError(f"undoproxy at {self.base_url} did not answer in time") from None
        if raw:
            return text
        return json.loads(text) if text else None

    def _explain(self, exc: urllib.error.HTTPError) -> str:
        try:
            payload = json.loads(exc.read().decode("utf-8"))
            message = payload.get("message") or payload.get("error") or str(payload)
        except (ValueError, AttributeError):
            message = exc.reason
        if exc.code == 401:
            hint = "" if self.token else " (no token found)"
            return (
                f"the admin token was refused{hint}: set {TOKEN_ENV} to the token "
                "`undoproxy run` printed"
            )
        return f"{message} (HTTP {exc.code})"
