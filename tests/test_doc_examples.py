"""Every fenced example in README.md and docs/*.md is executed (the way Datasette tests its
docs): a YAML block parses and, being a config, passes `undoproxy rules check`; a shell block
runs, in document order, against a real undoproxy that a new user's home points at; an output
block is compared with the real output.

A block that is not a whole config or cannot be run says so in the doc, in an HTML comment on
the line right before it, which this test reads:

    <!-- doc-test skip: WHY -->        not run, and why (a reason is required)
    <!-- doc-test yaml-only: WHY -->   YAML that parses, but is not undoproxy's config
    <!-- doc-test as: match|rule|rules -->   part of a rule: checked inside a whole config
    <!-- doc-test check: NAME -->      compared with real output by CHECKS[NAME] below

A block with no marker is run as what its language says (`yaml`: a config, `sh`: commands);
a block with no language needs a marker. Nothing is skipped silently.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.proc import Undoproxy, run_cli

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!-- doc-test (skip|yaml-only|as|check): (.+?) -->$")
_ENV_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc: where it is, its language, text and marker."""

    file: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(REPO))
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = _MARKER.match(lines[i - 1].strip()) if i else None
        yield Block(
            name,
            i + 1,
            opening.group(1),
            "\n".join(lines[i + 1 : end]) + "\n",
            (marker.group(1), marker.group(2)) if marker else None,
        )
        i = end + 1


BLOCKS = [b for doc in DOCS for b in doc_blocks(doc)]


def _of(kind: str) -> list[Block]:
    return [b for b in BLOCKS if (b.marker or ("", ""))[0] == kind]


# --- every block is accounted for ---------------------------------------------------------


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_block_is_run_or_says_why_not(block: Block) -> None:
    if block.marker is None:
        assert block.lang in ("yaml", "sh"), (
            f"{block.id}: a ```{block.lang} block needs a <!-- doc-test ... --> marker saying "
            "what it is"
        )
        return
    kind, value = block.marker
    if kind in ("skip", "yaml-only"):
        assert len(value) >= 20, f"{block.id}: say why this block is not run"
    elif kind == "as":
        assert value in WRAPS and block.lang == "yaml", block.id
    else:
        assert value in CHECKS, f"{block.id}: no check named {value!r} in {__file__}"


def test_markers_are_all_read() -> None:
    """A marker with a typo would silently not apply: every doc-test comment must parse."""
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if "doc-test" in line and line.strip().startswith("<!--"):
                assert _MARKER.match(line.strip()), f"{doc.name}:{n}: unreadable marker {line!r}"


# --- YAML: parses; a config passes `undoproxy rules check` --------------------------------

WRAPS: dict[str, Callable[[Any], Any]] = {
    "match": lambda doc: {"rules": [{"name": "doc-example", "match": doc.get("match", doc)}]},
    "rule": lambda doc: {"rules": [{"name": "doc-example", "match": _match_for(doc), **doc}]},
    "rules": lambda doc: {"rules": doc},
}


def _match_for(rule: Any) -> dict[str, str]:
    """A match for a rule shown without one: its path captures every {name} the rule uses."""
    names = dict.fromkeys(re.findall(r"(?<!\$)\{(\w+)\}", yaml.safe_dump(rule)))
    return {"host": "doc.example.test", "path": "".join(f"/x/{{{n}}}" for n in names) or "/"}


def _rules_check(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    # ${NAME} references are the user's secrets: checked with each one set.
    env = {**os.environ, **{n: f"doc-test-{n.lower()}-value" for n in _ENV_REF.findall(config)}}
    return run_cli("rules", "check", "-c", str(path), env=env)


@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if b.lang == "yaml" and (b.marker or ("",))[0] in ("", "as")],
    ids=lambda b: b.id,
)
def test_a_yaml_example_is_a_valid_config(block: Block, tmp_path: Path) -> None:
    doc = yaml.safe_load(block.text)  # a YAML error fails here, with its line
    config = block.text
    if block.marker is not None:
        config = yaml.safe_dump(WRAPS[block.marker[1]](doc), sort_keys=False)
    checked = _rules_check(tmp_path, config)
    assert checked.returncode == 0, f"{block.id}:\n{config}\n{checked.stdout}{checked.stderr}"


@pytest.mark.parametrize("block", _of("yaml-only"), ids=lambda b: b.id)
def test_a_yaml_only_example_parses(block: Block) -> None:
    yaml.safe_load(block.text)


# --- shell: run in order against a real undoproxy -----------------------------------------


@dataclass
class Newcomer:
    """A user's machine for the shell examples: a home whose ~/.undoproxy is a running
    undoproxy's state dir (so the CLI finds it with no option at all), a checkout with
    `.venv/bin/undoproxy`, and `undoproxy`/`python` on PATH."""

    home: Path
    checkout: Path
    instance: Undoproxy
    env: dict[str, str]
    outputs: dict[str, str]

    def run(self, script: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            cwd=self.checkout,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Newcomer]:
    root = tmp_path_factory.mktemp("newcomer")
    home, checkout, bin_dir = root / "home", root / "checkout", root / "bin"
    state = home / ".undoproxy"
    for d in (checkout / ".venv" / "bin", bin_dir):
        d.mkdir(parents=True)
    for name, target in (("undoproxy", f"{sys.executable} -m undoproxy"), ("python", None)):
        shim = f'#!/bin/sh\nexec {target or sys.executable} "$@"\n'
        for where in (bin_dir / name, checkout / ".venv" / "bin" / name):
            where.write_text(shim)
            where.chmod(0o755)
    instance = Undoproxy(
        root / "instance",
        {"state_dir": str(state), "store": {"path": str(state / "undoproxy.db")}},
    ).start()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("UNDOPROXY_") and k.lower() not in ("https_proxy", "http_proxy")
    }
    env.update(HOME=str(home), PATH=f"{bin_dir}:{env.get('PATH', '')}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    yield Newcomer(home, checkout, instance, env, {})
    instance.stop()


SHELL = [b for b in BLOCKS if b.lang == "sh" and b.marker is None]


def ran_through(newcomer: Newcomer, block: Block | None = None) -> dict[str, str]:
    """Run the shell blocks up to `block` (all: None) that have not run yet, in document
    order, as a reader does; their outputs by block id. Any test may ask, in any order."""
    for earlier in SHELL[: SHELL.index(block) + 1 if block else None]:
        if earlier.id in newcomer.outputs:
            continue
        done = newcomer.run(earlier.text)
        text = f"{earlier.id}:\n{earlier.text}\n{done.stdout}\n{done.stderr}"
        assert done.returncode == 0, text
        assert "Traceback" not in done.stdout + done.stderr, text
        newcomer.outputs[earlier.id] = done.stdout
    return newcomer.outputs


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.id)
def test_a_shell_example_runs(block: Block, newcomer: Newcomer) -> None:
    assert block.id in ran_through(newcomer, block)


def test_the_readme_quick_start_ends_rolled_back(newcomer: Newcomer) -> None:
    """Run above literally, in one shell, as a new user pastes it."""
    [quick_start] = [b for b in SHELL if b.file == "README.md" and "env --session demo" in b.text]
    output = ran_through(newcomer, quick_start)[quick_start.id]
    assert "session demo: rolled_back (1 skipped)" in output
    assert re.search(r"^1  st_\w+ .* read .* GET .*things", output, re.M), output
    assert re.search(r"^2  st_\w+ .* mutation .* POST .*things", output, re.M), output
    # Pasted again: env warns, and the agent's write is refused, saying why.
    again = newcomer.run(quick_start.text.replace(".venv/bin/undoproxy rollback demo", ""))
    assert "session demo is rolled_back" in again.stderr and "--session demo-2" in again.stderr
    assert "undoproxy_session_closed" in again.stdout and "NEW_NAME" in again.stdout


# --- output: compared with what undoproxy really prints -----------------------------------


def _shape(text: str) -> list[str]:
    """Lines with what differs from run to run (addresses, paths, ids, numbers, tokens)
    replaced by placeholders."""
    out = []
    for line in text.strip("\n").splitlines():
        line = re.sub(r"http://[\w.]+:\d+", "URL", line)
        line = re.sub(r"(?<![\w.])(/[\w.+-]+)+/?", "PATH", line)
        line = re.sub(r"^(  token    )\S+", r"\1TOKEN", line)
        line = re.sub(r"\b(st|s|ap)_[0-9a-f]{16}\b", "ID", line)
        line = re.sub(r"\b[0-9a-f]{64}\b", "HASH", line)
        line = re.sub(r"\bchain key [0-9a-f]{16}\b", "chain key KEY", line)
        line = re.sub(r"\(session [\w.~-]+,", "(session NAME,", line)
        line = re.sub(r"\d+", "N", line)
        out.append(line.rstrip())
    return out


def check_banner(block: Block, newcomer: Newcomer) -> None:
    """The banner shown is the one `undoproxy run` prints (the CLI named as it is run)."""
    real = "".join(newcomer.instance.output)
    real = real[real.index("undoproxy is running") : real.index("Stop: Ctrl-C") + 12]
    real = re.sub(r"running \(.*\)", "running (built-in defaults)", real)
    real = real.replace(f"{sys.executable} -m undoproxy", ".venv/bin/undoproxy")
    real = re.sub(r" -c \S+", "", real)  # this instance runs with a config file
    assert _shape(block.text) == _shape(real)


_REPORT_LINES = {
    "step": re.compile(r"^  \[(ok|XX|!!|--|\?\?|\.\.)\] #\d+ [A-Z]+ \S+$"),
    "outcome": re.compile(r"^       [a-z_]+: .+$"),
    "summary": re.compile(r"^session \S+: [a-z_]+ \((\d+ [a-z_]+(, )?)+\)$"),
    "title": re.compile(r"^(Rolling back|Plan for rolling back) session \S+, newest step first:$"),
}


def check_rollback_report(block: Block, newcomer: Newcomer) -> None:
    """Each line of the report shown has the shape of a line `undoproxy rollback` prints
    (here: of a real rollback of a POST, the quick start's)."""
    real = run_cli("rollback", "demo", "--dry-run", env=newcomer.env).stdout
    for text in (block.text, real):
        for line in text.strip().splitlines():
            assert any(p.match(line) for p in _REPORT_LINES.values()), line
    assert {k for k, p in _REPORT_LINES.items() if any(map(p.match, real.splitlines()))} <= {
        k for k, p in _REPORT_LINES.items() if any(map(p.match, block.text.splitlines()))
    }


def check_layout(block: Block, newcomer: Newcomer) -> None:
    """Every path the layout names exists."""
    named = re.findall(r"(?:^|\s)((?:undoproxy|tests|bench|deploy|docs)/[\w/.]*)", block.text)
    assert named
    for path in named:
        assert (REPO / path).exists(), path


def check_metric_names(block: Block, newcomer: Newcomer) -> None:
    """Every metric the queries use is served by GET /metrics."""
    token = (newcomer.home / ".undoproxy" / "admin-token").read_text().strip()
    served = requests.get(
        newcomer.instance.admin_url + "/metrics",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).text
    for name in set(re.findall(r"\bundoproxy_\w+", block.text)):
        assert re.search(rf"^{name}\b", served, re.M), name


def check_verify(block: Block, newcomer: Newcomer) -> None:
    """The synopsis is the command's, and `undoproxy verify` prints output of that shape."""
    synopsis, *shown = block.text.strip().splitlines()
    usage = run_cli("verify", "--help").stdout
    assert "-c FILE" in usage and "--head HASH" in usage and synopsis.startswith("undoproxy verify")
    real = newcomer.run("undoproxy verify")
    assert real.returncode == 0, real.stdout + real.stderr
    assert _shape("\n".join(shown)) == _shape(real.stdout)


def check_verify_failed(block: Block, newcomer: Newcomer) -> None:
    """A step edited outside undoproxy makes `verify` print this line (on a copy of the
    journal, edited with sqlite3)."""
    state = newcomer.home / ".undoproxy"
    copy = newcomer.home / "edited.db"
    with sqlite3.connect(state / "undoproxy.db") as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE steps SET url = url || '?edited' WHERE seq = 1")
    config = newcomer.home / "edited.yaml"
    config.write_text(f"state_dir: {state}\nstore: {{path: {copy}}}\n")
    real = newcomer.run(f"undoproxy verify -c {config} || true")
    first = real.stdout.splitlines()[0]
    assert _shape(first) == _shape(block.text), real.stdout
    copy.unlink()


def check_pack_file(block: Block, newcomer: Newcomer) -> None:
    """The pack file shown agrees with the shipped pack of that name."""
    shown = yaml.safe_load(block.text)
    shipped = yaml.safe_load((REPO / "undoproxy" / "packs" / f"{shown['name']}.yaml").read_text())
    for key in ("name", "description", "hosts", "enterprise_prefix"):
        assert shown[key] == shipped[key], key
    rules = {r["name"]: r for r in shipped["rules"]}
    for rule in shown["rules"]:
        assert {k: rules[rule["name"]].get(k) for k in rule} == rule, rule["name"]


CHECKS: dict[str, Callable[[Block, Newcomer], None]] = {
    "banner": check_banner,
    "rollback-report": check_rollback_report,
    "layout": check_layout,
    "metric-names": check_metric_names,
    "verify": check_verify,
    "verify-failed": check_verify_failed,
    "pack-file": check_pack_file,
}


@pytest.mark.parametrize("block", _of("check"), ids=lambda b: b.id)
def test_an_output_example_matches_the_real_output(block: Block, newcomer: Newcomer) -> None:
    assert block.marker is not None
    ran_through(newcomer)  # the checks read what the examples left (the session demo)
    CHECKS[block.marker[1]](block, newcomer)
