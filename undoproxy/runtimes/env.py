"""The environment `undoproxy env` prints: pure data in, (name, value) pairs out, per shell.

One table of what each runtime reads, so that `env`, `doctor`, the docs test and
docs/clients.md agree. Every variable is needed by at least one runtime that ignores the
others (see docs/clients.md for which).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from undoproxy import cabundle
from undoproxy.runtimes import truststore

SHELLS = ("sh", "fish", "powershell", "dotenv", "json")
# What undoproxy's own commands read and an agent must never get: the admin token would let
# it approve its own held requests (and roll back, freeze, resolve), the credentials key would
# open what the journal keeps sealed. Literal names, so this module needs neither the admin
# client nor cryptography (client.TOKEN_ENV, credentials.KEY_ENV; a test keeps them equal).
WITHHELD = ("UNDOPROXY_ADMIN_TOKEN", "UNDOPROXY_CREDENTIALS_KEY")
PRELOAD = Path(__file__).with_name("fetch-proxy.cjs")


@dataclass(frozen=True)
class Setup:
    """What a running undoproxy told the CLI: where to send an agent and what it must trust."""

    proxy_url: str  # with the session's credentials when there is a session
    ca_cert: Path  # undoproxy's CA alone (Node adds it to its own store)
    ca_bundle: Path  # the system's CAs plus undoproxy's (the others replace their store)
    no_proxy: tuple[str, ...]  # never through the proxy: loopback and the admin address
    session: str | None = None
    session_port: tuple[str, int] | None = None  # the session's own listener, if any
    # (variable, placeholder) of each secret the session may use (undoproxy/broker/): the
    # agent's SDK starts with a placeholder, undoproxy puts the real value in on the way out
    placeholders: tuple[tuple[str, str], ...] = ()

    @property
    def state_dir(self) -> Path:
        """Where undoproxy keeps the bundle, and the truststore and wgetrc beside it."""
        return self.ca_bundle.parent


def _java_no_proxy(entries: tuple[str, ...]) -> str:
    out = []
    for entry in entries:
        entry = entry.strip()
        if entry.startswith("."):
            entry = "*" + entry
        if ":" in entry and not entry.startswith("["):
            entry = f"[{entry}]"  # an IPv6 address
        out.append(entry)
    return "|".join(out)


def java_options(setup: Setup) -> str:
    """JAVA_TOOL_OPTIONS: every JVM reads it; the session port stands in for credentials."""
    if setup.session_port is not None:
        host, port = setup.session_port
    else:
        parts = urlsplit(setup.proxy_url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 8080
    store = setup.state_dir / cabundle.TRUSTSTORE_NAME
    options = [
        f"-Dhttps.proxyHost={host}",
        f"-Dhttps.proxyPort={port}",
        f"-Dhttp.proxyHost={host}",
        f"-Dhttp.proxyPort={port}",
        # Java's default (localhost|127.*|[::1]) would skip all of 127/8: say exactly ours.
        f"-Dhttp.nonProxyHosts={_java_no_proxy(setup.no_proxy)}",
        f"-Djavax.net.ssl.trustStore={store}",
        f"-Djavax.net.ssl.trustStorePassword={truststore.PASSWORD}",
        "-Djavax.net.ssl.trustStoreType=PKCS12",
    ]
    return " ".join(options)


def variables(setup: Setup) -> list[tuple[str, str]]:
    """Every (name, value) an agent's environment needs, in a stable order."""
    bundle = str(setup.ca_bundle)
    no_proxy = ",".join(setup.no_proxy)
    values = [
        ("HTTPS_PROXY", setup.proxy_url),
        ("HTTP_PROXY", setup.proxy_url),
        ("https_proxy", setup.proxy_url),
        ("http_proxy", setup.proxy_url),
        ("NO_PROXY", no_proxy),
        ("no_proxy", no_proxy),
        ("SSL_CERT_FILE", bundle),  # OpenSSL: Python ssl/urllib/httpx/aiohttp, Go, Ruby, PHP
        ("REQUESTS_CA_BUNDLE", bundle),  # requests
        ("CURL_CA_BUNDLE", bundle),  # curl
        ("GIT_SSL_CAINFO", bundle),  # git
        # git's libcurl otherwise sends proxy credentials only after a 407 challenge
        ("GIT_HTTP_PROXY_AUTHMETHOD", "basic"),
        ("AWS_CA_BUNDLE", bundle),  # boto3, aws cli
        ("PIP_CERT", bundle),  # pip
        ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", bundle),  # grpcio (and gRPC C-core bindings)
        ("WGETRC", str(setup.state_dir / cabundle.WGETRC_NAME)),  # wget (GnuTLS)
        # PHP's curl and streams: an extra ini (the leading ":" keeps the distribution's).
        ("PHP_INI_SCAN_DIR", ":" + str(setup.state_dir / cabundle.PHP_INI_DIR)),
        ("NODE_EXTRA_CA_CERTS", str(setup.ca_cert)),  # Node adds it to its own store
        ("NODE_USE_ENV_PROXY", "1"),  # Node >= 24, 22.21: fetch and http honour the proxy
        ("NODE_OPTIONS", f"--require {_node_quote(str(PRELOAD))}"),  # Node 20: fetch too
        ("JAVA_TOOL_OPTIONS", java_options(setup)),
    ]
    if setup.session is not None:
        values.append(("UNDOPROXY_SESSION", setup.session))
    if setup.session_port is not None:
        host, port = setup.session_port
        # For anything configured by host and port only: this port is the session.
        values.append(("UNDOPROXY_SESSION_PROXY", f"http://{host}:{port}"))
    values.extend(setup.placeholders)
    return values


def agent_process_env(
    parent: Mapping[str, str], values: Iterable[tuple[str, str]]
) -> dict[str, str]:
    """The environment of a process undoproxy starts for an agent (`exec`'s command, `doctor`'s
    probes and command): `parent` without the WITHHELD variables, with `values` set."""
    env = {name: value for name, value in parent.items() if name not in WITHHELD}
    env.update(values)
    return env


def _node_quote(path: str) -> str:
    return f'"{path}"' if " " in path else path


def render(values: list[tuple[str, str]], shell: str) -> str:
    """The lines that set `values` in `shell` (one of SHELLS)."""
    if shell == "json":
        return json.dumps(dict(values), indent=2)
    if shell == "sh":
        lines = [f"export {k}={shlex.quote(v)}" for k, v in values]
    elif shell == "fish":
        lines = [f"set -gx {k} {_fish_quote(v)}" for k, v in values]
    elif shell == "powershell":
        lines = [f"$env:{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in values]
    elif shell == "dotenv":
        lines = [f"{k}={_dotenv_quote(v)}" for k, v in values]
    else:
        raise ValueError(f"shell must be one of {', '.join(SHELLS)}, got {shell!r}")
    return "\n".join(lines)


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dotenv_quote(value: str) -> str:
    if value and not any(c in value for c in " \t\"'#$\\`"):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
