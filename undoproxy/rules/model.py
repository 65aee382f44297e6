"""The rule model: what a parsed rule says, and what matching it produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from undoproxy.compensators.catalog import NEEDS_SNAPSHOT
from undoproxy.errors import Location
from undoproxy.methods import READ_METHODS as READ_METHODS
from undoproxy.rules.conditions import BodyCondition
from undoproxy.rules.guards import Guard
from undoproxy.rules.matcher import MatchSpec
from undoproxy.rules.record import Record
from undoproxy.rules.request import RequestView
from undoproxy.rules.templates import template_references_snapshot

# The methods a rule may name: IANA's HTTP method registry (WebDAV, CalDAV, versioning
# included) and PURGE; anything else in a rule is most likely a typo, and is reported.
HTTP_METHODS: Final = frozenset(
    {
        *("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"),
        *("PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH"),
        *("MKCALENDAR", "REPORT", "ACL", "BIND", "UNBIND", "REBIND", "ORDERPATCH", "QUERY"),
        *("CHECKIN", "CHECKOUT", "UNCHECKOUT", "VERSION-CONTROL", "BASELINE-CONTROL"),
        *("MKWORKSPACE", "MKACTIVITY", "MERGE", "LABEL", "UPDATE", "LINK", "UNLINK"),
        *("MKREDIRECTREF", "UPDATEREDIRECTREF", "PURGE"),
    }
)
RISKS: Final = ("low", "medium", "high", "critical")
ACTIONS: Final = ("allow", "hold", "deny")
ON_SNAPSHOT_ERROR: Final = ("block", "proceed")
# Where the agent's credentials may go on undoproxy's own requests (snapshot, verification,
# compensation): only to the origin of the agent's request, or (forward) wherever the rule's
# templates point.
CREDENTIALS: Final = ("origin", "forward")
# What a matching request is, whatever its method says: a search by POST is a read, a GET
# that triggers an action is a mutation. None: by method (undoproxy/methods.py).
KINDS: Final = ("read", "mutation")


@dataclass(frozen=True)
class SnapshotSpec:
    """`snapshot:` of a rule: GET `url_template` (None: the request's own URL) before forwarding."""

    url_template: str | None = None


@dataclass(frozen=True)
class Correction:
    """What rollback also sends for an irreversible email rule (the email pack's `correction:`):
    `text` under `subject` to the same recipients, through the API of `provider` (a rule of
    the email pack: sendgrid, mailgun, postmark, resend, ses...)."""

    provider: str
    subject: str
    text: str


@dataclass(frozen=True, eq=False)
class Rule:
    """One rule as loaded: what it matches and what undoproxy does with a match.

    Compared and hashed by identity (names are unique within a RuleSet). `match_spec` holds the
    compiled `match:` block except `methods`; a Rule built by hand with only `name` and `where`
    matches every request.
    """

    name: str
    where: Location
    risk: str = "medium"
    action: str = "allow"
    # A pack rule with no `action:`: defaults.mutations decides whether a matching mutation
    # may go (packs recognise and compensate; they do not grant permission).
    defers_action: bool = False
    methods: frozenset[str] | None = None
    snapshot: SnapshotSpec | None = None
    compensate: str | dict[str, Any] | None = None
    timeout: float | None = None
    on_snapshot_error: str = "block"
    credentials: str = "origin"
    guard: Guard | None = None  # this rule's own budgets, counted over its matches per session
    kind: str | None = None  # read | mutation; None: by method
    # Conditions on the response's JSON body that make a 2xx answer a failure (Slack answers
    # errors with HTTP 200 and "ok": false): the step is `failed`, nothing to undo.
    fails_when: tuple[BodyCondition, ...] = ()
    record: Record | None = None  # what a matching step records into its `meta`
    correction: Correction | None = None  # set by the email pack's `correction:` only
    reason: str | None = None
    description: str | None = None
    match_spec: MatchSpec = field(default_factory=MatchSpec, repr=False)

    def snapshot_needed(self) -> bool:
        """True when a GET snapshot must be taken before forwarding a matching request.

        That is: `snapshot` is given, `compensate` names a compensator that restores from a
        snapshot, or an explicit compensation template refers to `${snapshot.body...}`.
        """
        if self.snapshot is not None:
            return True
        if isinstance(self.compensate, str):
            return self.compensate in NEEDS_SNAPSHOT
        if isinstance(self.compensate, dict):
            # A read-then-undo makes its own read (compensate.read), never a GET snapshot.
            return "read" not in self.compensate and template_references_snapshot(self.compensate)
        return False

    @property
    def effective_snapshot(self) -> SnapshotSpec | None:
        """The snapshot to take: `snapshot`, or the request's own URL when one is needed."""
        if self.snapshot is not None:
            return self.snapshot
        return SnapshotSpec(None) if self.snapshot_needed() else None

    @property
    def path_captures(self) -> tuple[str, ...]:
        """Names of the `{captures}` in `match.path`."""
        return self.match_spec.path.captures if self.match_spec.path else ()

    def matches(self, req: RequestView) -> dict[str, str] | None:
        """The path captures when this rule alone matches `req`, else None (no index used)."""
        if self.methods is not None and req.method not in self.methods:
            return None
        if not self.match_spec.host_matches(req.host, req.port):
            return None
        return self.match_spec.match_rest(req, restrictive=self.restrictive)

    @property
    def restrictive(self) -> bool:
        """True for rules that stop a request (hold, deny): they match ambiguous bodies."""
        return self.action in ("hold", "deny")

    def verdict(self, req: RequestView) -> Verdict:
        """Whether this rule matches `req`, with every reason when it does not."""
        reasons = self.match_spec.mismatches(req, restrictive=self.restrictive)
        if self.methods is not None and req.method not in self.methods:
            # Reasons read in match order: host, method, path, query, headers, body.
            at = 0 if self.match_spec.host_matches(req.host, req.port) else 1
            reasons.insert(at, f"method {req.method} is not {', '.join(sorted(self.methods))}")
        if reasons:
            return Verdict(self, False, tuple(reasons), {})
        captures = self.match_spec.match_rest(req, restrictive=self.restrictive) or {}
        return Verdict(self, True, (), captures)


@dataclass(frozen=True)
class Match:
    """The first rule that matched a request, and the path captures it took."""

    rule: Rule
    captures: dict[str, str]


@dataclass(frozen=True)
class Verdict:
    """One rule considered by `RuleSet.explain`: matched, or the reasons it did not."""

    rule: Rule
    matched: bool
    reasons: tuple[str, ...] = ()
    captures: dict[str, str] = field(default_factory=dict)
