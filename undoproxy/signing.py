"""Request signing for undoproxy's own requests to hosts that need it (AWS Signature V4).

An agent's signed request cannot be replayed: its signature covers that one request's method,
path, query, date and body. To read the target before the write (snapshot) and to send and
verify the undo, undoproxy needs a key of its own for that host, given in config.yaml:

    signing:
      - host: s3.*.amazonaws.com          # a host pattern, as in rules (port only if named)
        aws:
          access_key_id: ${UNDOPROXY_S3_KEY_ID}
          secret_access_key: ${UNDOPROXY_S3_SECRET}
          session_token: ${AWS_SESSION_TOKEN}   # optional (temporary credentials)
          region: us-east-1
          service: s3

Every request undoproxy itself sends to a matching host (snapshot, after-read, drift and
verification reads, compensations) is signed at send time with that key: the agent's own
`Authorization`, `X-Amz-*` signature headers and presigned-URL query are dropped first. The
key lives in memory only; nothing secret is stored with a step, logged or exported (`repr`
hides it).

SigV4 is implemented here with hashlib/hmac (about 80 lines) rather than by adding botocore to
the runtime dependencies: botocore is a large package with its own urllib3 pins, and we need
one function of it. tests/test_signing.py checks this signer against botocore's, byte for byte.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from undoproxy.errors import Location
from undoproxy.rules.patterns import HostPattern

ALGORITHM = "AWS4-HMAC-SHA256"
# Headers of the agent's signature: never sent again, replaced by ours.
_AGENT_SIGNATURE_HEADERS = frozenset(
    {"authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "host"}
)
# Payload hashes that say the body is not signed (S3 over HTTPS, aws-chunked uploads whose
# chunks carry no signature): a request signed again keeps them, so its body needs no hash.
UNSIGNED_PAYLOADS = frozenset({"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"})
# Payload hashes that chain a signature through every chunk of the body: the chunks are signed
# with the agent's key, so such a request cannot be signed again with another.
SIGNED_CHUNKS = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
# A presigned URL's query: its signature, never ours.
_PRESIGN_QUERY = frozenset(
    {
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-expires",
        "x-amz-signedheaders",
        "x-amz-signature",
        "x-amz-security-token",
    }
)


@dataclass(frozen=True)
class AwsKey:
    """An AWS access key and where it signs (region, service). The secret never shows in repr.

    An empty region or service (a `secrets:` entry that names none) is taken from the request
    being signed: the scope of the agent's own signature, else the host name
    (`SERVICE.REGION.amazonaws.com`); see `Signers.sign`.
    """

    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str
    service: str
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SigningEntry:
    """One key undoproxy signs with: a `signing:` entry, or a `secrets:` entry with `aws:`
    (`secret` names it; `sessions`, when given, are the session ids or globs it serves)."""

    host: HostPattern
    aws: AwsKey
    where: Location | None = None
    secret: str | None = None  # the `secrets:` entry's name; None for a `signing:` entry
    sessions: tuple[str, ...] | None = None  # None: every session

    def serves(self, session: str | None) -> bool:
        """May this key sign for `session` (None: a request of no session in particular)?"""
        if self.sessions is None:
            return True
        return session is not None and any(fnmatch.fnmatchcase(session, p) for p in self.sessions)

    def describe(self) -> str:
        """What a report may say about it (never the secret; a brokered key not even its id)."""
        if self.secret is not None:
            return f"secret {self.secret} for {self.host.text}"
        return (
            f"signing entry for {self.host.text} "
            f"(key {self.aws.access_key_id}, {self.aws.region}/{self.aws.service})"
        )


@dataclass
class Signers:
    """The keys undoproxy signs with, `signing:` entries first, then the `aws:` entries of
    `secrets:`: the first that matches the host and serves the session wins.

    One object is shared by everything that signs (the proxy, snapshots, rollback); the
    credential broker replaces `entries` when its secrets are reloaded.
    """

    entries: tuple[SigningEntry, ...] = ()

    def for_url(self, url: str, session: str | None = None) -> SigningEntry | None:
        """The entry that signs requests to `url` made for `session`, or None."""
        entries = self.entries
        if not entries:  # the common case, on every request undoproxy sends
            return None
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return None
        return next((e for e in entries if e.host.matches(host, port) and e.serves(session)), None)

    def sign(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        now: datetime.datetime | None = None,
        *,
        session: str | None = None,
        entry: SigningEntry | None = None,
        payload_sha256: str | None = None,
    ) -> tuple[str, dict[str, str]]:
        """(url, headers) to send: signed when an entry matches (or `entry` is given), else
        as given. A payload the request marks unsigned stays unsigned; `payload_sha256` is the
        body's hash when the body is streamed from a file (bodyfiles.py), not given here."""
        entry = entry or self.for_url(url, session)
        if entry is None:
            return url, dict(headers)
        key = scoped(entry.aws, url, headers)
        payload = unsigned_payload(headers) or payload_sha256
        return sign_v4(key, method, url, headers, body, now, payload_hash=payload)


def unsigned_payload(headers: Mapping[str, str]) -> str | None:
    """The request's `X-Amz-Content-Sha256` when it says the body is not signed, else None."""
    value = next((v for k, v in headers.items() if k.lower() == "x-amz-content-sha256"), "")
    return value if value in UNSIGNED_PAYLOADS else None


def scoped(key: AwsKey, url: str, headers: Mapping[str, str]) -> AwsKey:
    """`key` with the region and service it leaves empty taken from the request: the scope of
    its own signature, else its host (`service.region.amazonaws.com`), else us-east-1/s3."""
    if key.region and key.service:
        return key
    region, service = agent_scope(list(headers.items())) or _host_scope(url) or ("", "")
    return replace(
        key,
        region=key.region or region or "us-east-1",
        service=key.service or service or "s3",
    )


def _host_scope(url: str) -> tuple[str, str] | None:
    """(region, service) a host name like `dynamodb.eu-west-1.amazonaws.com` names."""
    labels = (urlsplit(url).hostname or "").lower().split(".")
    if len(labels) >= 4 and labels[-2:] == ["amazonaws", "com"]:
        service, region = labels[-4], labels[-3]
        if service.startswith("s3") or labels[0] == "s3":
            return region, "s3"
        return region, service
    return None


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(query: str) -> str:
    """The query as SigV4 wants it (and as undoproxy then sends it): each name and value
    percent-encoded once, pairs sorted; a presigned URL's signature parameters dropped."""
    pairs = []
    for piece in query.split("&"):
        if not piece:
            continue
        name, _, value = piece.partition("=")
        name, value = unquote(name), unquote(value)
        if name.lower() in _PRESIGN_QUERY:
            continue
        pairs.append((_encode(name), _encode(value)))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def canonical_path(path: str, service: str) -> str:
    """S3 signs the path as sent; other services sign it percent-encoded once more."""
    path = path or "/"
    if service == "s3":
        return path
    return quote(path, safe="/~")


def sign_v4(
    key: AwsKey,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    now: datetime.datetime | None = None,
    *,
    payload_hash: str | None = None,
) -> tuple[str, dict[str, str]]:
    """(url, headers) of the request signed with `key`: the URL with its query canonical
    (send exactly this URL, unchanged), the headers with Host, X-Amz-Date,
    X-Amz-Content-Sha256, Authorization (and X-Amz-Security-Token) set. `payload_hash`
    (UNSIGNED-PAYLOAD, ...) stands for the body's SHA-256 when given."""
    parts = urlsplit(url)
    query = canonical_query(parts.query)
    out_url = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, ""))
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    payload = payload_hash or hashlib.sha256(body or b"").hexdigest()
    out = {k: v for k, v in headers.items() if k.lower() not in _AGENT_SIGNATURE_HEADERS}
    default_port = 443 if parts.scheme == "https" else 80
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    if parts.port and parts.port != default_port:
        host = f"{host}:{parts.port}"
    out["Host"] = host
    out["X-Amz-Date"] = stamp
    out["X-Amz-Content-Sha256"] = payload
    if key.session_token:
        out["X-Amz-Security-Token"] = key.session_token
    signed = {
        k.lower(): " ".join(v.strip().split())
        for k, v in out.items()
        if k.lower() in ("host", "content-type", "content-md5") or k.lower().startswith("x-amz-")
    }
    names = ";".join(sorted(signed))
    canonical = "\n".join(
        [
            method.upper(),
            canonical_path(parts.path, key.service),
            query,
            "".join(f"{k}:{signed[k]}\n" for k in sorted(signed)),
            names,
            payload,
        ]
    )
    scope = f"{day}/{key.region}/{key.service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(f"AWS4{key.secret_access_key}".encode(), day)
    for part in (key.region, key.service, "aws4_request"):
        k = _hmac(k, part)
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"{ALGORITHM} Credential={key.access_key_id}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}"
    )
    return out_url, out


def agent_scope(headers: list[tuple[str, str]]) -> tuple[str, str] | None:
    """(region, service) of an agent's SigV4 `Authorization` header, or None."""
    for name, value in headers:
        if name.lower() == "authorization" and value.startswith(ALGORITHM):
            scope = value.partition("Credential=")[2].partition(",")[0].split("/")
            if len(scope) >= 4:
                return scope[2], scope[3]
    return None


def missing_key_reason(scheme: str, url: str, headers: list[tuple[str, str]]) -> str:
    """Why a signed request is irreversible, and the exact `signing:` entry that would fix it."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    default_port = 443 if parts.scheme == "https" else 80
    if parts.port and parts.port != default_port:
        host = f"{host}:{parts.port}"
    region, service = agent_scope(headers) or ("REGION", "SERVICE")
    return (
        f"the request is signed ({scheme}): its signature cannot be replayed to read the "
        "target before it or to send an inverse request after it. To let undoproxy sign "
        f"its own, add to config.yaml: signing: [{{host: {host}, aws: {{access_key_id: "
        "${AWS_ACCESS_KEY_ID}, secret_access_key: ${AWS_SECRET_ACCESS_KEY}, "
        f"region: {region}, service: {service}}}}}] (docs/packs.md#s3)"
    )
