"""How fast requests are matched against 10 and against 1,000 rules.

Each measured match includes building the `RequestView` from raw parts, as the proxy does on
every request. The plain first-match scan over the same 1,000 rules is the baseline the index
is compared with. Run from the repository root:

    .venv/bin/python bench/rules_match.py
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from undoproxy.errors import Location  # noqa: E402
from undoproxy.rules import RequestView, RuleSet, parse_rules  # noqa: E402
from undoproxy.yamlsource import load_text  # noqa: E402

ITERATIONS = 20_000
REPEATS = 3
SEED = 7

RESOURCES = ["issues", "contacts", "charges", "messages", "files", "users", "orders", "deals"]
WRITE_METHODS = [["POST"], ["PUT", "PATCH"], ["DELETE"], ["PATCH"], ["POST", "PUT"]]


def make_hosts(count: int) -> list[str]:
    """Exact API host names, like a company's SaaS estate."""
    return [f"api.service{i}.example.com" for i in range(count)]


def make_rules(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """A rule mix: mostly exact hosts, some globs and catch-alls, templates, some bodies."""
    hosts = make_hosts(max(3, count // 10))
    rules: list[dict[str, Any]] = []
    for i in range(count):
        match: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.80:
            match["host"] = rng.choice(hosts)
        elif roll < 0.95:
            match["host"] = f"*.service{rng.randrange(len(hosts))}.example.com"
        # else: no host, the rule applies everywhere
        match["method"] = rng.choice(WRITE_METHODS) if rng.random() < 0.85 else "GET"
        resource = rng.choice(RESOURCES)
        match["path"] = rng.choice(
            [
                f"/v1/{resource}",
                f"/v1/{resource}/{{id}}",
                f"/repos/{{owner}}/{{repo}}/{resource}",
                f"/v2/{resource}/{{id}}/items/{{item}}",
                f"/admin/{resource}/**",
            ]
        )
        if rng.random() < 0.2:
            match["body"] = rng.choice(
                [
                    {"$.amount": {"gte": rng.choice([100, 1000, 10000])}},
                    {"$.labels": {"contains": "urgent"}},
                    {"$.status": {"in": ["closed", "archived"]}},
                    {"$.items[*].sku": {"regex": "^GIFT-"}},
                ]
            )
        rule: dict[str, Any] = {"name": f"rule-{i}", "match": match}
        if match["method"] != "GET":
            rule["action"] = rng.choice(["allow", "allow", "hold", "deny"])
        rules.append(rule)
    return rules


def load(rules: list[dict[str, Any]]) -> RuleSet:
    """Parse through the real YAML path, as `undoproxy run` would."""
    doc = load_text(yaml.safe_dump({"rules": rules}, sort_keys=False), "bench.yaml")
    return parse_rules(doc["rules"], None, base_dir=ROOT, where=Location("bench.yaml", 0))


def make_requests(count: int, host_count: int, rng: random.Random) -> list[tuple[Any, ...]]:
    """A traffic mix: mostly reads, JSON bodies on writes, some hosts no rule mentions."""
    hosts = [*make_hosts(host_count), "api.unrelated.test", "cdn.example.net"]
    out: list[tuple[Any, ...]] = []
    for _ in range(count):
        method = rng.choices(["GET", "POST", "PUT", "PATCH", "DELETE"], [60, 20, 8, 8, 4])[0]
        resource = rng.choice(RESOURCES)
        path = rng.choice(
            [
                f"/v1/{resource}",
                f"/v1/{resource}/{rng.randrange(1000)}",
                f"/repos/acme/web/{resource}",
                f"/v2/{resource}/{rng.randrange(99)}/items/{rng.randrange(9)}",
                f"/admin/{resource}/a/b",
                "/healthz",
            ]
        )
        host = rng.choice(hosts)
        if rng.random() < 0.3:
            host = "eu." + host.removeprefix("api.")  # reaches the glob rules
        query = "?page=2&per_page=50" if method == "GET" and rng.random() < 0.3 else ""
        body = b""
        if method != "GET":
            body = json.dumps(
                {
                    "amount": rng.randrange(20000),
                    "labels": rng.sample(["bug", "urgent", "docs", "ui"], 2),
                    "status": rng.choice(["open", "closed"]),
                    "items": [{"sku": rng.choice(["GIFT-1", "A-2"]), "qty": 1}],
                }
            ).encode()
        headers = {
            "Host": host,
            "User-Agent": "agent/1.0",
            "Accept": "application/json",
            "Content-Type": "application/json",
            "Authorization": "Bearer x",
        }
        out.append((method, f"https://{host}{path}{query}", headers, body))
    return out


def plain_scan(rules: RuleSet, req: RequestView) -> object:
    """The baseline: try every rule in order."""
    for rule in rules.rules:
        if rule.matches(req) is not None:
            return rule
    return None


def measure(
    rules: RuleSet, requests: list[tuple[Any, ...]], *, indexed: bool, iterations: int = ITERATIONS
) -> float:
    """Best-of-REPEATS matches per second over `iterations` requests."""
    best = float("inf")
    n = len(requests)
    for _ in range(REPEATS):
        start = time.perf_counter()
        for i in range(iterations):
            method, url, headers, body = requests[i % n]
            req = RequestView.from_parts(method, url, headers, body)
            if indexed:
                rules.match(req)
            else:
                plain_scan(rules, req)
        best = min(best, time.perf_counter() - start)
    return iterations / best


def main() -> list[dict[str, object]]:
    """Run the benchmark, print a table, and return its rows."""
    rng = random.Random(SEED)
    small = load(make_rules(10, rng))
    large = load(make_rules(1000, rng))
    requests = make_requests(2000, 100, rng)
    small_rate = measure(small, requests, indexed=True)
    large_rate = measure(large, requests, indexed=True)
    # The scan is two orders of magnitude slower: fewer iterations keep the run short.
    scan_rate = measure(large, requests, indexed=False, iterations=ITERATIONS // 10)
    rows: list[dict[str, object]] = [
        {"bench": "rules", "case": "10 rules", "value": round(small_rate), "unit": "matches/s"},
        {"bench": "rules", "case": "1000 rules", "value": round(large_rate), "unit": "matches/s"},
        {
            "bench": "rules",
            "case": "1000 rules, plain scan (baseline)",
            "value": round(scan_rate),
            "unit": "matches/s",
        },
        {
            "bench": "rules",
            "case": "ratio 1000 rules / 10 rules",
            "value": round(large_rate / small_rate, 2),
            "unit": "ratio",
        },
        {
            "bench": "rules",
            "case": "ratio 1000 rules indexed / plain scan",
            "value": round(large_rate / scan_rate, 1),
            "unit": "ratio",
        },
    ]
    width = max(len(str(r["case"])) for r in rows)
    print(f"{'case'.ljust(width)} | matches/s")
    print(f"{'-' * width}-|-----------")
    for row in rows:
        value = row["value"]
        shown = f"{value:,}" if row["unit"] == "matches/s" else f"{value}x"
        print(f"{str(row['case']).ljust(width)} | {shown}")
    return rows


if __name__ == "__main__":
    main()
