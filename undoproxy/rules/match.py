"""`RuleSet`: first-match-wins matching, indexed so it stays fast with many rules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from undoproxy.rules.model import Match, Rule, Verdict
from undoproxy.rules.request import RequestView

CANDIDATE_CACHE_SIZE = 4096


@dataclass(frozen=True)
class _Candidates:
    """The rules a (host, port, method) can reach, split by the first path segment.

    `by_segment[s]` holds, in rule order, the rules whose path starts with the literal segment
    `s` plus those whose path starts with a wildcard (or that have no path); `other` holds only
    the latter, for requests whose first segment no rule names.
    """

    all: tuple[Rule, ...]
    by_segment: dict[str, tuple[Rule, ...]]
    other: tuple[Rule, ...]

    @classmethod
    def build(cls, rules: tuple[Rule, ...]) -> _Candidates:
        """Split an ordered candidate list by first path segment, keeping the order."""
        firsts = [r.match_spec.path.first_segment if r.match_spec.path else None for r in rules]
        other = tuple(r for r, f in zip(rules, firsts, strict=True) if f is None)
        by_segment = {
            seg: tuple(r for r, f in zip(rules, firsts, strict=True) if f is None or f == seg)
            for seg in {f for f in firsts if f is not None}
        }
        return cls(rules, by_segment, other)

    def for_path(self, path: str) -> tuple[Rule, ...]:
        """The candidates for a request path (normalized, starting with /)."""
        if not self.by_segment:
            return self.other
        return self.by_segment.get(path[1:].partition("/")[0], self.other)


class RuleSet:
    """An ordered list of rules; the first rule that matches a request wins.

    Matching does not scan every rule. Rules are bucketed by exact host name; rules with a
    glob host or no host at all go to a shared list. For a (host, port, method) the two are
    merged back into rule order, filtered by host and method once, split by the first literal
    path segment, and cached, so a request only runs the path/query/header/body checks of the
    few rules that could match it. `rules` is read-only: build a new RuleSet to change them.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: list[Rule] = list(rules)
        self._by_host: dict[str, list[int]] = {}
        self._any_host: list[int] = []
        self._cache: dict[tuple[str, int, str], _Candidates] = {}
        for index, rule in enumerate(self.rules):
            hosts = rule.match_spec.hosts
            if not hosts or not all(h.exact for h in hosts):
                self._any_host.append(index)
            for pattern in hosts:
                if pattern.exact:
                    bucket = self._by_host.setdefault(pattern.host, [])
                    if not bucket or bucket[-1] != index:  # a rule may list a host twice
                        bucket.append(index)

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def get(self, name: str) -> Rule | None:
        """The rule called `name`, if any."""
        return next((r for r in self.rules if r.name == name), None)

    def candidates(self, host: str, port: int, method: str) -> tuple[Rule, ...]:
        """The rules whose host and method match, in rule order (cached)."""
        return self._candidates(host, port, method).all

    def _candidates(self, host: str, port: int, method: str) -> _Candidates:
        key = (host, port, method)
        found = self._cache.get(key)
        if found is not None:
            return found
        exact = self._by_host.get(host, [])
        if exact and self._any_host:
            indices: Iterable[int] = sorted({*exact, *self._any_host})
        else:
            indices = exact or self._any_host
        rules = tuple(
            rule
            for rule in (self.rules[i] for i in indices)
            if (rule.methods is None or method in rule.methods)
            and rule.match_spec.host_matches(host, port)
        )
        found = _Candidates.build(rules)
        if len(self._cache) >= CANDIDATE_CACHE_SIZE:
            # Crude but bounded: a flood of distinct hosts cannot grow memory, and refilling
            # costs one scan per key, no worse than not caching.
            self._cache.clear()
        self._cache[key] = found
        return found

    def match(self, req: RequestView) -> Match | None:
        """The first rule that matches `req` with its path captures, or None."""
        for rule in self._candidates(req.host, req.port, req.method).for_path(req.path):
            captures = rule.match_spec.match_rest(req, restrictive=rule.restrictive)
            if captures is not None:
                return Match(rule, captures)
        return None

    def explain(self, req: RequestView) -> list[Verdict]:
        """A verdict for each rule in order, up to and including the first that matches.

        Deliberately a plain scan with no index, so it also serves as the reference that
        `match` is tested against.
        """
        verdicts: list[Verdict] = []
        for rule in self.rules:
            verdict = rule.verdict(req)
            verdicts.append(verdict)
            if verdict.matched:
                break
        return verdicts
