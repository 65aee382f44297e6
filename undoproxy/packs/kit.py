"""`undoproxy packs test PACK --against URL`: prove a pack's undos on a real server.

A throw-away `undoproxy run` (its own state dir and journal, the pack alone on the server's
host, `defaults.compensate: none` so that nothing but the pack undoes anything) takes each
case (`cases.py`): its setup goes straight to the server, its request through undoproxy in a
session of its own, then the session is rolled back. The case is judged by rollback's own
verdict and evidence, and cross-checked by the case's `check` reads made straight to the
server before the request and after the rollback: a step rollback called restored whose check
differs is a false report, and fails the run whatever was expected.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

from undoproxy.client import AdminClient
from undoproxy.errors import UndoproxyError
from undoproxy.packs.cases import Call, Case

START_TIMEOUT = 60.0  # seconds for the throw-away undoproxy to start
REQUEST_TIMEOUT = 60.0
_ADDR = re.compile(r"^\s+(proxy|admin)\s+http://([\d.]+):(\d+)", re.M)
RESTORED, NOT_RESTORED, IRREVERSIBLE = "restored", "not restored", "irreversible"
FALSE_REPORT = "NOT RESTORED, reported restored"


@dataclass
class Answer:
    """A direct answer: status and body (JSON when it parses)."""

    status: int
    body: Any

    def same_as(self, other: Answer, ignore: tuple[str, ...]) -> bool:
        return self.status == other.status and _without(self.body, ignore) == _without(
            other.body, ignore
        )


def _without(body: Any, ignore: tuple[str, ...]) -> Any:
    if isinstance(body, dict):
        return {k: _without(v, ignore) for k, v in body.items() if k not in ignore}
    if isinstance(body, list):
        return [_without(v, ignore) for v in body]
    return body


@dataclass
class Outcome:
    """What became of one case."""

    case: Case
    result: str
    status: str = ""  # rollback's verdict for the step
    evidence: str = ""
    rule: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def as_expected(self) -> bool:
        return self.result == self.case.expect and not self.notes_fail

    @property
    def notes_fail(self) -> bool:
        return any(n.startswith("!") for n in self.notes)

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "rule": self.rule,
            "expect": self.case.expect,
            "result": self.result,
            "verdict": self.status,
            "evidence": self.evidence,
            "notes": [n.lstrip("!") for n in self.notes],
            "ok": self.as_expected,
        }


def send(
    call: Call, base: str, extra: dict[str, str], opener: urllib.request.OpenerDirector
) -> Answer:
    """Send `call` to the server `base` names; its answer (an HTTP error is an answer)."""
    request = urllib.request.Request(
        call.url(base), data=call.body, method=call.method, headers={**call.headers, **extra}
    )
    try:
        with opener.open(request, timeout=REQUEST_TIMEOUT) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise UndoproxyError(f"{call.line} on {base}: {exc}") from None
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return Answer(status, body)


def _opener(proxy: str | None, cafile: str | None, insecure: bool) -> urllib.request.OpenerDirector:
    context = ssl.create_default_context(cafile=cafile)
    if insecure and cafile is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    handlers: list[Any] = [urllib.request.HTTPSHandler(context=context)]
    handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}))
    return urllib.request.build_opener(*handlers)


def _host(base: str) -> str:
    """host[:port] of a server URL, as a pack's `hosts:` names it (port only if not default)."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UndoproxyError(f"--against must be an http(s) URL, got {base!r}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    return parts.hostname if port == default else f"{parts.hostname}:{port}"


@dataclass
class Proxy:
    """The throw-away undoproxy: its proxy and admin URLs, its CA bundle and token."""

    proxy_url: str
    admin_url: str
    ca_bundle: str
    token: str


def config_for(
    pack: str, base: str, workdir: Path, *, insecure: bool, user_config: Path | None
) -> dict[str, Any]:
    """The throw-away undoproxy's config: the pack alone, on the server's host."""
    host = _host(base)
    config: dict[str, Any] = {
        "proxy": {"listen": "127.0.0.1:0", "upstream_insecure": insecure},
        "admin": {"listen": "127.0.0.1:0"},
        "state_dir": str(workdir / "state"),
        "store": {"path": str(workdir / "journal.db")},
        "defaults": {"mutations": "log", "compensate": "none"},
        "packs": [],
    }
    path = Path(pack)
    if path.suffix in (".yaml", ".yml") or os.sep in pack:
        if not path.is_file():
            raise UndoproxyError(f"no pack file at {pack}")
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise UndoproxyError(f"{pack} is not a pack file (a mapping with name: and rules:)")
        doc["hosts"] = [host]
        doc.pop("cases", None)
        placed = workdir / f"{doc.get('name') or 'pack'}.yaml"
        placed.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        config["include"] = [str(placed)]
    else:
        config["packs"] = [{"name": pack, "hosts": [host]}]
    if user_config is not None:
        mine = yaml.safe_load(user_config.read_text(encoding="utf-8")) or {}
        for key in ("signing", "secrets"):  # the keys undoproxy signs or authenticates with
            if isinstance(mine, dict) and key in mine:
                config[key] = mine[key]
    return config


@contextmanager
def running(config: dict[str, Any], workdir: Path) -> Iterator[Proxy]:
    """`undoproxy run` with `config`, stopped at the end."""
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "undoproxy", "run", "-c", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if len({m[0] for m in _ADDR.findall("".join(lines))}) == 2:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while not ready.wait(0.1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise UndoproxyError("undoproxy did not start:\n" + "".join(lines[-30:]))
        found = {m[0]: f"http://{m[1]}:{m[2]}" for m in _ADDR.findall("".join(lines))}
        state = Path(config["state_dir"])
        yield Proxy(
            found["proxy"],
            found["admin"],
            str(state / "ca-bundle.pem"),
            (state / "admin-token").read_text().strip(),
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)


def run_case(
    case: Case, n: int, base: str, proxy: Proxy, headers: dict[str, str], insecure: bool
) -> Outcome:
    """Set up, check, send through undoproxy, roll back, check again: the case's outcome."""
    direct = _opener(None, None, insecure)
    for call in case.setup:
        answer = send(call, base, headers, direct)
        if answer.status >= 400:
            return Outcome(
                case, NOT_RESTORED, notes=[f"!setup {call.line} answered {answer.status}"]
            )
    before = [send(c, base, headers, direct) for c in case.check]
    session = f"packtest-{n}-{secrets.token_hex(4)}"
    through = _opener(proxy.proxy_url, proxy.ca_bundle, insecure)
    answer = send(case.request, base, {**headers, "X-Undoproxy-Session": session}, through)
    admin = AdminClient(proxy.admin_url, proxy.token)
    path = f"/api/sessions/{quote(session, safe='')}"
    steps = [s for s in admin.call("GET", path).get("steps", []) if s.get("kind") == "mutation"]
    rules = sorted({str(s.get("rule") or "(no rule)") for s in steps})
    outcome = Outcome(case, NOT_RESTORED, rule=", ".join(rules))
    outcome.notes.append(f"the request answered {answer.status}")
    if case.rule and case.rule not in rules:
        outcome.notes.append(f"!it matched {outcome.rule}, not {case.rule}")
    if not steps:
        outcome.notes.append("!undoproxy saw no mutation: is the pack's host the server's?")
        return outcome
    report = admin.call("POST", f"{path}/rollback", {})
    verdicts = [s for s in report.get("steps", [])]
    outcome.status = ", ".join(str(s.get("status")) for s in verdicts)
    outcome.evidence = "; ".join(_evidence(s) for s in verdicts)
    after = [send(c, base, headers, direct) for c in case.check]
    checks_same = all(b.same_as(a, case.ignore) for b, a in zip(before, after, strict=True))
    statuses = {str(s.get("status")) for s in verdicts}
    if "irreversible" in statuses:
        outcome.result = IRREVERSIBLE
    elif statuses <= {"compensated", "skipped"}:
        outcome.result = RESTORED if checks_same else FALSE_REPORT
        if not checks_same:
            outcome.notes.append("!the check reads differ from before the request")
    if case.check and outcome.result == RESTORED:
        outcome.notes.append(f"{len(case.check)} check read(s) as before")
    return outcome


def _evidence(step: dict[str, Any]) -> str:
    """The evidence a verdict rests on, as one line."""
    ev = step.get("evidence") or {}
    if "read" in ev:
        return f"{ev['read']} -> {ev.get('status')}: {ev.get('shows')}"
    if "journal" in ev:
        return f"journal: {ev['journal']}" + (f" ({ev['detail']})" if ev.get("detail") else "")
    return str(step.get("detail") or "")


def run(
    pack: str,
    cases: list[Case],
    base: str,
    *,
    headers: dict[str, str],
    insecure: bool = False,
    user_config: Path | None = None,
) -> list[Outcome]:
    """Every case of a pack, each in its own session of one throw-away undoproxy."""
    with tempfile.TemporaryDirectory(prefix="undoproxy-packtest-") as tmp:
        workdir = Path(tmp)
        config = config_for(pack, base, workdir, insecure=insecure, user_config=user_config)
        with running(config, workdir) as proxy:
            return [
                run_case(case, n, base, proxy, headers, insecure) for n, case in enumerate(cases, 1)
            ]
