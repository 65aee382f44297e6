"""The whole application in one process: store, proxy and admin in our own asyncio loop.

mitmproxy is embedded as a library.

Only the mitmproxy addons undoproxy needs are registered (core, proxyserver, next_layer,
tlsconfig, disable_h2c, then ours): DumpMaster's ~35 defaults cost a third of the throughput,
and its ErrorCheck exits the process on any early error. With a plain Master a taken port
would fail silently, so start-up checks that the proxy really listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from mitmproxy import options
from mitmproxy.addons import core, disable_h2c, next_layer, proxyserver, tlsconfig
from mitmproxy.master import Master

from undoproxy import cabundle, retention
from undoproxy.admin import tls_api
from undoproxy.admin.app import create_app
from undoproxy.admin.context import AdminContext
from undoproxy.approvals.notify import Webhooks
from undoproxy.approvals.queue import ApprovalQueue
from undoproxy.bodyfiles import BodyFiles, private_dir
from undoproxy.broker import Broker
from undoproxy.broker import api as secrets_api
from undoproxy.client import ADMIN_URL_FILE, listen_url
from undoproxy.config import Config
from undoproxy.credentials import CredentialBox, write_private
from undoproxy.errors import UndoproxyError
from undoproxy.events import EventBus
from undoproxy.inflight import InFlight
from undoproxy.proxy.bodies import Bodies
from undoproxy.proxy.bounded import BodyPolicy
from undoproxy.proxy.brokering import InjectSecrets, KeepSecretsFromAgent
from undoproxy.proxy.framing import Framing
from undoproxy.proxy.gate import Gate
from undoproxy.proxy.grpc import GrpcCalls, as_grpc_status
from undoproxy.proxy.guard import FailClosed
from undoproxy.proxy.holds import Holds
from undoproxy.proxy.identity import SessionIdentity
from undoproxy.proxy.journaling import JournalAddon
from undoproxy.proxy.layers import ProtocolPolicy, journal_refusals
from undoproxy.proxy.mcp import McpTraffic, as_jsonrpc_error
from undoproxy.proxy.names import OneName
from undoproxy.proxy.reads import LargeReads
from undoproxy.proxy.snapshots import Snapshots
from undoproxy.proxy.streaming import Streaming
from undoproxy.proxy.tls_failures import TlsFailures
from undoproxy.proxy.upload_plan import UploadPlanner
from undoproxy.proxy.uploads import SpoolPump
from undoproxy.proxy.websockets import WebSockets
from undoproxy.rollback import Rollback
from undoproxy.runtimes import listeners as listener_routes
from undoproxy.runtimes.listeners import SessionListeners
from undoproxy.store.factory import describe, open_store
from undoproxy.store.journal import Journal
from undoproxy.upstream import UpstreamClient

log = logging.getLogger(__name__)
TOKEN_FILE = "admin-token"  # undoproxy.client.TOKEN_FILE: where the CLI reads it


@dataclass
class Running:
    """A started undoproxy: what it listens on and what it owns."""

    master: Master
    admin: web.AppRunner
    journal: Journal
    context: AdminContext
    proxy_address: tuple[str, int]
    admin_address: tuple[str, int]
    token_generated: bool
    guard: FailClosed
    broker: Broker = field(default_factory=Broker)  # the secrets (reloaded on SIGHUP)
    background: list[Any] = field(default_factory=list)
    periodic: list[asyncio.Task[None]] = field(default_factory=list)  # cancelled at stop


def admin_token(config: Config) -> tuple[str, bool]:
    """The admin token and whether it was generated now (kept in the state dir, mode 0600)."""
    if config.admin_token:
        return config.admin_token, False
    path = config.state_dir / TOKEN_FILE
    if path.exists():
        return path.read_text().strip(), False
    token = secrets.token_urlsafe(24)
    write_private(path, token.encode())
    return token, True


def _prepare_state_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)


async def start(config: Config) -> Running:
    """Open the journal, start the proxy and the admin app; raise UndoproxyError on failure."""
    logging.getLogger("mitmproxy").setLevel(logging.WARNING)
    _prepare_state_dir(config.state_dir)
    token, generated = admin_token(config)
    broker = Broker(config.secrets, config.signing)  # reads the secrets; UndoproxyError if not
    events = EventBus()
    box = CredentialBox.from_state_dir(config.state_dir)
    journal = await open_store(config, events, box)
    try:
        await journal.claim_key(box.fingerprint())
    except BaseException:
        await journal.close()
        raise

    opts = options.Options(
        listen_host=config.proxy_listen[0],
        listen_port=config.proxy_listen[1],
        confdir=str(config.state_dir),
        ssl_insecure=config.upstream_insecure,
        # Never relay bytes as raw TCP (a non-WebSocket 101 closes the connection instead);
        # ProtocolPolicy refuses every other non-HTTP stream: see proxy/layers.py.
        rawtcp=False,
    )
    master = Master(opts)
    proxy_server = proxyserver.Proxyserver()
    listeners = SessionListeners(proxy_server, config.proxy_listen[0], config.state_dir)
    files = BodyFiles(private_dir(config.state_dir / "bodies"), box.file_key())
    snapshots = Snapshots(
        journal,
        UpstreamClient(insecure=config.upstream_insecure, broker=broker, files=files),
        box,
        auto=config.defaults_compensate == "auto",
        hold_irreversible=config.defaults_mutations == "hold-irreversible",
        files=files,
        max_body=config.max_body,
    )
    approvals = ApprovalQueue(journal, Webhooks(config.approvals_notify))
    inflight = InFlight()  # mutations forwarded and not yet answered: freeze/rollback wait
    await approvals.recover()  # before serving: what the last run left pending has expired
    holds = Holds(
        approvals,
        journal,
        default_timeout=config.approvals_timeout,
        defaults_compensate=config.defaults_compensate,
        preview=snapshots.preview,
    )
    identity = SessionIdentity(journal, config.proxy_auth, listeners.session_for)
    gate = Gate(
        config.rules,
        config.defaults_mutations,
        holder=holds,
        journal=journal,
        hold_at=config.hold_at,
        guard=config.guard,
        auto_compensate=config.defaults_compensate == "auto",
        signers=broker.signers,
    )
    sockets = WebSockets(journal, proxy_server, gate.budgets)
    tls_failures = TlsFailures(identity.session_of)
    # Order matters: each hook runs addon by addon, in this order. The session comes first
    # (whatever is refused is filed in it), then the checks that refuse a request before it
    # is judged (names, WebSocket upgrades as mutations), then the bodies are decoded for
    # the gate's rules. Snapshots must follow the gate (nothing is snapshotted for a denied
    # request) and precede the journal (whose write-ahead entry includes the snapshot and the
    # prepared compensation). The credential broker wraps the rest: what an agent must not
    # send is refused before the rules judge it, and the real secrets go in last, after the
    # journal wrote the request ahead with the agent's placeholders (proxy/brokering.py).
    # mitmproxy sees only FailClosed, which runs them in this order and answers the agent if
    # one raises.
    ours: list[Any] = [
        identity,
        OneName(),
        sockets,
        Streaming(),
        Bodies(),
        secrets_check := KeepSecretsFromAgent(broker),
        McpTraffic(),  # before the gate: the rules see the called tool's hints
        GrpcCalls(),
        gate,
        holds,  # as an addon too: client_disconnected expires approvals, done() expires all
        snapshots,
        JournalAddon(journal, inflight),
        Framing(),  # only a request about to be forwarded gets its length said
        InjectSecrets(broker),  # last: nothing may await between the journal and forwarding
    ]
    master.addons.add(
        core.Core(),
        proxy_server,
        next_layer.NextLayer(),
        # Right after NextLayer: amends its decision (HTTP only, bounded bodies).
        ProtocolPolicy(
            BodyPolicy(private_dir(config.state_dir / "spool"), config.max_body),
            journal_refusals(journal, identity.session_of),
        ),
        tlsconfig.TlsConfig(),
        disable_h2c.DisableH2C(),
        guard := FailClosed(
            ours,
            journal,
            inflight,
            close_socket=sockets.close,
            # undoproxy's own answers in the shape the agent's protocol expects
            reshape=[as_jsonrpc_error, as_grpc_status],
        ),
        SpoolPump(proxy_server),  # sends spooled bodies once judged (proxy/uploads.py)
        LargeReads(proxy_server),  # connections read in pieces of up to 256 KiB (proxy/reads.py)
        # Large uploads judged on their headers (proxy/upload_plan.py); after FailClosed: its
        # request hook runs once ours have, and lets the agent's body be read again.
        UploadPlanner(proxy_server, [secrets_check.foresee, gate.foresee]),
        tls_failures,  # observes failed handshakes only (doctor's evidence): outside the guard
    )
    # Lazy: no upstream connection until a request is really forwarded, so a denied or held
    # request never even opens a connection to its upstream.
    master.options.update(connection_strategy="lazy")

    ca_cert = cabundle.ensure_ca(config.state_dir)
    ca_bundle = cabundle.write_bundle(config.state_dir)
    context = AdminContext(
        config=config,
        journal=journal,
        token=token,
        ca_cert=ca_cert,
        ca_bundle=ca_bundle,
        proxy_address=config.proxy_listen,
    )
    context.approvals = approvals
    context.inflight = inflight
    context.rollback = Rollback(
        journal,
        UpstreamClient(insecure=config.upstream_insecure, broker=broker, files=files),
        box,
        inflight=inflight,
        after_reads=snapshots.after_reads,
    )

    app = create_app(
        context, extra_routes=[*listener_routes.ROUTES, *tls_api.ROUTES, *secrets_api.ROUTES]
    )
    app[listener_routes.LISTENERS] = listeners
    app[tls_api.TLS_FAILURES] = tls_failures
    secrets_api.setup(app, broker)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.admin_listen[0], config.admin_listen[1])
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await journal.close()
        raise UndoproxyError(
            f"cannot listen for the admin API on "
            f"{config.admin_listen[0]}:{config.admin_listen[1]}: "
            f"{exc.strerror or exc}"
        ) from None
    admin_address = runner.addresses[0][:2]
    shown_host = "127.0.0.1" if admin_address[0] in ("0.0.0.0", "::", "") else admin_address[0]
    approvals.admin_url = f"http://{shown_host}:{admin_address[1]}"

    run_task = asyncio.get_running_loop().create_task(master.run(), name="mitmproxy")
    ps = master.addons.get("proxyserver")
    while not ps.is_running and not run_task.done():
        await asyncio.sleep(0.01)
    addrs = ps.listen_addrs()
    if not addrs:
        master.shutdown()
        with contextlib.suppress(Exception):
            await run_task
        await runner.cleanup()
        await journal.close()
        raise UndoproxyError(
            f"cannot listen for agents on {config.proxy_listen[0]}:"
            f"{config.proxy_listen[1]} (is the port taken?)"
        )
    proxy_address = (addrs[0][0], addrs[0][1])
    await listeners.restore()  # per-session ports handed out before a restart
    context.proxy_address = proxy_address
    running = Running(
        master,
        runner,
        journal,
        context,
        proxy_address,
        admin_address,
        generated,
        guard,
        broker,
        background=[run_task],
    )
    if config.retention_after:
        running.periodic.append(
            asyncio.get_running_loop().create_task(
                retention.run_forever(journal, config), name="retention"
            )
        )
    return running


async def stop(running: Running) -> None:
    """Stop accepting, then flush the journal and close it."""
    running.master.shutdown()
    for periodic in running.periodic:
        periodic.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await periodic
    for task in running.background:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task
    await running.admin.cleanup()
    if running.context.rollback is not None:
        await running.context.rollback.client.close()
    await running.journal.close()


def banner(config: Config, running: Running) -> str:
    """What `undoproxy run` prints once it is ready."""
    ctx = running.context
    ph, pp = running.proxy_address
    ah, ap = running.admin_address
    lines = [
        f"undoproxy is running ({config.source or 'built-in defaults'})",
        f"  proxy    http://{ph}:{pp}   (auth: {config.proxy_auth})",
        f"  admin    http://{ah}:{ap}/",
        f"  CA       {ctx.ca_cert}",
        f"  bundle   {ctx.ca_bundle}",
        f"  journal  {describe(config, running.journal)}",
    ]
    kept = config.state_dir / TOKEN_FILE
    if running.token_generated:
        lines.append(f"  token    {ctx.token}   (generated; kept in {kept})")
    elif config.admin_token:
        lines.append("  token    admin.token of the config (UNDOPROXY_ADMIN_TOKEN for the CLI)")
    else:
        lines.append(f"  token    kept in {kept} (the CLI reads it from there)")
    cli = cli_command()
    # The CLI finds this instance (its admin URL and token) through the same config file.
    c = f" -c {shlex.quote(shown_path(config.source))}" if config.source else ""
    lines.append(
        f'Agents: eval "$({cli} env{c} --session NAME)"   Check: {cli} doctor{c}   Stop: Ctrl-C'
    )
    return "\n".join(lines)


def announce(config: Config, running: Running) -> Path:
    """Write the admin URL into the state dir, where the CLI looks for the running undoproxy."""
    path = config.state_dir / ADMIN_URL_FILE
    path.write_text(listen_url(*running.admin_address) + "\n")
    return path


def withdraw(path: Path, running: Running) -> None:
    """Remove the admin URL `announce` wrote, unless another undoproxy has replaced it since."""
    with contextlib.suppress(OSError):
        if path.read_text().strip() == listen_url(*running.admin_address):
            path.unlink()


def cli_command() -> str:
    """How the user who started this process runs the CLI: `undoproxy` when it is on PATH,
    else the script's path (`.venv/bin/undoproxy`), else `python -m undoproxy`."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.name != "undoproxy" or not script.is_file():
        return f"{shlex.quote(sys.executable)} -m undoproxy"
    on_path = shutil.which("undoproxy")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "undoproxy"
    return shlex.quote(shown_path(script))


def shown_path(path: str | Path) -> str:
    """A path as a user pastes it into a shell here: relative below the working directory,
    else absolute."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def _quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler of errors nobody awaited, minus cancellations: on Python 3.11 the
    streams' connection callback reports each agent connection still open at shutdown (its
    handler task was cancelled) as an error with a traceback; a cancellation is never one."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def serve(config: Config) -> None:
    """Run until SIGINT/SIGTERM; the journal is flushed before returning."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_quiet_cancellations)  # before mitmproxy saves the loop's own
    running = await start(config)
    # Everything start-up made (modules, mitmproxy, the rules of every pack) lives as long as
    # the process: leave it out of the cyclic garbage collector's full passes, which scanned
    # it all again and again (~75 ms each, 6 % of a rollback of 3,000 steps).
    gc.collect()
    gc.freeze()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, running.master.shutdown)
    loop.add_signal_handler(signal.SIGHUP, secrets_api.reload_and_say, running.broker)
    announced = announce(config, running)
    # Only once a signal stops us cleanly: whoever waits for the banner may stop us at once.
    print(banner(config, running), flush=True)
    try:
        await running.master.should_exit.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        withdraw(announced, running)
        await stop(running)
        print("undoproxy stopped; journal flushed", flush=True)
