"""`RuleSet`: first-match-wins matching, indexed so it stays fast with many rules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from undoproxy.rules.model import Match, Rule, Verdict
from undoproxy.rules.request import RequestView

CANDIDATE_CACHE_SIZE = 4096


class RuleSet:
    """An ordered list of rules; the first rule that matches a request wins.

    Matching does not scan every rule. Rules are bucketed by exact host name; rules with a
    glob host or no host at all go to a shared list. For a (host, port, method) the two are
    merged back into rule order and filtered by host and method once, and that candidate list
    is cached, so a request only runs the path/query/header/body checks of rules that could
    match it. `rules` is read-only: build a new RuleSet to change them.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: list[Rule] = list(rules)
        self._by_host: dict[str, list[int]] = {}
        self._any_host: list[int] = []
        self._cache: dict[tuple[str, int, str], tuple[Rule, ...]] = {}
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
        key = (host, port, method)
        found = self._cache.get(key)
        if found is not None:
            return found
        exact = self._by_host.get(host, ())
        indices = (
            sorted({*exact, *self._any_host})
            if exact and self._any_host
            else (exact or self._any_host)
        )
        found = tuple(
            rule
            for rule in (self.rules[i] for i in indices)
            if (rule.methods is None or method in rule.methods)
            and rule.match_spec.host_matches(host, port)
        )
        if len(self._cache) >= CANDIDATE_CACHE_SIZE:
            # Crude but bounded: a flood of distinct hosts cannot grow memory, and refilling
            # costs one scan per key, no worse than not caching.
            self._cache.clear()
        self._cache[key] = found
        return found

    def match(self, req: RequestView) -> Match | None:
        """The first rule that matches `req` with its path captures, or None."""
        for rule in self.candidates(req.host, req.port, req.method):
            captures = rule.match_spec.match_rest(req)
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
