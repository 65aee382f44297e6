"""The github pack, as an agent meets it: PyGithub through a real `undoproxy run` to a fake
GitHub Enterprise (`/api/v3`), then a rollback, then the fake's whole state compared with the
state before the session. One test per row of the contract's GitHub table."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from github import Auth, Github, GithubException
from github.Repository import Repository

from tests.support import fake_github
from tests.support.fake_github import TOKEN, GitHubState
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def state() -> GitHubState:
    return GitHubState()


@pytest.fixture(scope="module")
def github(state: GitHubState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = fake_github.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, github: ThreadedServer) -> Iterator[Undoproxy]:
    config = fake_github.pack_config("github", github.port)
    instance = Undoproxy(tmp_path_factory.mktemp("github-pack"), config).start()
    yield instance
    instance.stop()


class Agent:
    """One session's PyGithub client, through undoproxy, on a repository of its own."""

    def __init__(self, up: Undoproxy, github: ThreadedServer, state: GitHubState) -> None:
        self.up, self.state = up, state
        self.session = f"gh-{uuid.uuid4().hex[:8]}"
        self.owner, self.name = state.login, f"repo-{self.session}"
        repo = state.repo(self.owner, self.name)
        repo.files["README.md"] = b"# hello\n"
        self.client = Github(
            auth=Auth.Token(TOKEN),
            base_url=f"https://127.0.0.1:{github.port}{fake_github.PREFIX}",
            verify=up.ca_bundle,
            retry=None,
        )

    def repo(self) -> Repository:
        return self.client.get_repo(f"{self.owner}/{self.name}")

    def dump(self) -> dict[str, Any]:
        return self.state.dump().get(f"{self.owner}/{self.name}", {})

    def rollback(self) -> dict[str, Any]:
        r = self.up.api("POST", f"/api/sessions/{self.session}/rollback", json={})
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture
def agent(
    up: Undoproxy, github: ThreadedServer, state: GitHubState, monkeypatch: pytest.MonkeyPatch
) -> Agent:
    a = Agent(up, github, state)
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", up.proxy_url(a.session))
    return a


def _statuses(report: dict[str, Any]) -> list[str]:
    return [s["status"] for s in report["steps"]]


def _seed_issue(agent: Agent, title: str = "seed", labels: tuple[str, ...] = ()) -> int:
    """An issue that existed before the session (made directly in the fake)."""
    repo = agent.state.repo(agent.owner, agent.name)
    number = len(repo.issues) + 1
    for name in labels:
        repo.labels[name] = {"name": name, "color": "ededed", "url": "x"}
    repo.issues[number] = {
        "number": number,
        "id": number,
        "title": title,
        "body": "before",
        "state": "open",
        "state_reason": None,
        "labels": list(labels),
        "assignees": [],
        "milestone": None,
        "updated_at": "2025-12-31T00:00:00Z",
    }
    return number


# Rows whose rollback puts the repository back exactly as it was: (seed, act) where the seed is
# what existed before the session (made in the fake directly) and `act` is the agent's call.
def _no_seed(agent: Agent) -> Any:
    return None


def _issue_seed(agent: Agent) -> int:
    return _seed_issue(agent, labels=("triage",))


def _comment_seed(agent: Agent) -> int:
    number = _seed_issue(agent)
    repo = agent.state.repo(agent.owner, agent.name)
    repo.comments[7] = {"id": 7, "body": "original", "issue_number": number, "updated_at": "x"}
    return number


def _labels_seed(agent: Agent) -> int:
    # Labels that exist in the repository: adding an unknown one to an issue creates it in the
    # repository too, which the contract's row (remove it from the issue) leaves there.
    number = _seed_issue(agent, labels=("bug",))
    repo = agent.state.repo(agent.owner, agent.name)
    for name in ("new one", "needs triage"):
        repo.labels[name] = {"name": name, "color": "ededed", "url": "x"}
    return number


ROWS: list[Any] = [
    pytest.param(
        _issue_seed,
        lambda a, n: (
            a.repo()
            .get_issue(n)
            .edit(title="renamed", body="new", labels=["wontfix"], state="closed")
        ),
        "github/update-issue",
        id="PATCH issue",
    ),
    pytest.param(
        _seed_issue,
        lambda a, n: a.repo().get_issue(n).create_comment("a comment"),
        "github/create-comment",
        id="POST comment",
    ),
    pytest.param(
        _comment_seed,
        lambda a, n: a.repo().get_issue(n).get_comment(7).edit("rewritten by the agent"),
        "github/update-comment",
        id="PATCH comment",
    ),
    pytest.param(
        _no_seed,
        lambda a, n: a.repo().create_label("agent made", "ff0000"),
        "github/create-label",
        id="POST label",
    ),
    pytest.param(
        _labels_seed,
        lambda a, n: a.repo().get_issue(n).add_to_labels("bug", "new one", "needs triage"),
        "github/add-issue-labels",
        id="POST issue labels",
    ),
    pytest.param(
        _no_seed,
        lambda a, n: a.repo().create_file("docs/new.md", "add", "new file\n"),
        "github/write-file",
        id="PUT contents creating a file",
    ),
    pytest.param(
        _no_seed,
        lambda a, n: a.repo().update_file(
            "README.md", "edit", "# changed\n", fake_github.blob_sha(b"# hello\n")
        ),
        "github/write-file",
        id="PUT contents updating a file",
    ),
    pytest.param(
        _no_seed,
        lambda a, n: a.repo().delete_file(
            "README.md", "remove", fake_github.blob_sha(b"# hello\n")
        ),
        "github/delete-file",
        id="DELETE contents",
    ),
    pytest.param(
        _no_seed,
        lambda a, n: a.repo().create_git_ref("refs/heads/agent/work", "a" * 40),
        "github/create-ref",
        id="POST git ref",
    ),
]


def _mutations(agent: Agent) -> list[dict[str, Any]]:
    session = agent.up.api("GET", f"/api/sessions/{agent.session}").json()
    return [s for s in session["steps"] if s["method"] != "GET"]


@pytest.mark.parametrize(("seed", "act", "rule"), ROWS)
def test_rollback_puts_the_repository_back(
    agent: Agent, seed: Callable[[Agent], Any], act: Callable[[Agent, Any], Any], rule: str
) -> None:
    seeded = seed(agent)
    before = agent.dump()
    act(agent, seeded)
    assert agent.dump() != before
    assert [s["rule"] for s in _mutations(agent)] == [rule]
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert "read back" in report["steps"][0]["detail"]
    assert report["state"] == "rolled_back"
    assert agent.dump() == before


def test_a_created_issue_is_closed_as_not_planned(agent: Agent) -> None:
    issue = agent.repo().create_issue("agent's issue", body="hi")
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert "state" in report["steps"][0]["detail"]
    closed = agent.state.repo(agent.owner, agent.name).issues[issue.number]
    assert (closed["state"], closed["state_reason"]) == ("closed", "not_planned")


def test_a_created_pull_request_is_closed(agent: Agent) -> None:
    pull = agent.repo().create_pull(title="agent's PR", body="", head="agent", base="main")
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.repo(agent.owner, agent.name).issues[pull.number]["state"] == "closed"


def test_a_created_repository_is_deleted(agent: Agent) -> None:
    before = agent.state.dump()
    agent.client.get_user().create_repo(f"made-{agent.session}")
    assert agent.state.dump() != before
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.dump() == before


def test_several_steps_roll_back_newest_first(agent: Agent) -> None:
    before = agent.dump()
    repo = agent.repo()
    issue = repo.create_issue("one")
    issue.edit(title="two")
    issue.create_comment("three")
    repo.create_label("four", "00ff00")
    report = agent.rollback()
    assert _statuses(report) == ["compensated"] * 4, report
    after = agent.dump()
    closed = after["issues"].pop(str(issue.number), None) or after["issues"].pop(issue.number)
    assert (closed["title"], closed["state"]) == ("one", "closed")
    assert after == before


HELD: list[Any] = [
    pytest.param(lambda a: a.repo().delete(), "github/delete-repo", "critical", id="DELETE repo"),
    pytest.param(
        lambda a: a.repo().get_pull(1).merge(),
        "github/merge-pull",
        "high",
        id="PUT merge",
    ),
]


@pytest.mark.parametrize(("act", "rule", "risk"), HELD)
def test_held_rows_wait_for_a_person_and_denied_change_nothing(
    agent: Agent, act: Callable[[Agent], Any], rule: str, risk: str
) -> None:
    agent.repo()  # reads are not held
    if rule == "github/merge-pull":
        _seed_issue(agent)
    before = agent.state.dump()
    call = in_thread(lambda: act(agent))
    pending = wait_pending(agent.up, agent.session)
    assert (pending["rule"], pending["risk"]) == (rule, risk)
    assert decide(agent.up, pending["id"], "deny", reason="no").status_code == 200
    with pytest.raises(GithubException) as denied:
        call.result(30)
    assert denied.value.status == 403
    assert agent.state.dump() == before
    report = agent.rollback()
    assert _statuses(report) == ["skipped"], report


def test_an_undo_github_accepted_but_did_not_apply_is_failed_then_sent_again(
    agent: Agent,
) -> None:
    issue = agent.repo().create_issue("agent's issue")
    agent.state.ignore_patches = True
    try:
        report = agent.rollback()
    finally:
        agent.state.ignore_patches = False
    assert _statuses(report) == ["failed"], report
    assert "state is not as before" in report["steps"][0]["detail"]
    assert report["state"] == "rollback_incomplete"
    # A later rollback reads first: still open, and a PATCH is safe to repeat.
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert "sent again" in report["steps"][0]["detail"]
    assert agent.state.repo(agent.owner, agent.name).issues[issue.number]["state"] == "closed"


def test_pygithub_reads_the_fake_directly(
    github: ThreadedServer, state: GitHubState, upstream_cert: tuple[Path, Path]
) -> None:
    """The fake is one PyGithub can parse: the same calls without undoproxy."""
    state.repo("octo", "direct")
    client = Github(
        auth=Auth.Token(TOKEN),
        base_url=f"https://127.0.0.1:{github.port}{fake_github.PREFIX}",
        verify=str(upstream_cert[0]),
        retry=None,
    )
    repo = client.get_repo("octo/direct")
    issue = repo.create_issue("direct", labels=["a"])
    issue.edit(state="closed")
    assert repo.get_issue(issue.number).state == "closed"
    created = repo.create_file("f.txt", "m", "x")
    assert created["content"].sha == fake_github.blob_sha(b"x")


def test_fields_someone_changed_since_the_agent_are_a_conflict_not_overwritten(
    agent: Agent,
) -> None:
    number = _seed_issue(agent)
    agent.repo().get_issue(number).edit(title="the agent's title")
    issue = agent.state.repo(agent.owner, agent.name).issues[number]
    issue["title"] = "a person's title"  # changed by someone else after the agent
    report = agent.rollback()
    assert _statuses(report) == ["conflict"], report
    assert issue["title"] == "a person's title"
    r = agent.up.api("POST", f"/api/sessions/{agent.session}/rollback", json={"force": True})
    assert [s["status"] for s in r.json()["steps"]] == ["compensated"], r.json()
    assert issue["title"] == "seed"


def test_an_answer_without_the_number_makes_the_step_irreversible_never_guessed(
    agent: Agent,
) -> None:
    seen = len(agent.state.log)
    agent.state.omit = {"number"}
    try:
        agent.repo().create_issue("no number in the answer")
    finally:
        agent.state.omit = set()
    report = agent.rollback()
    assert _statuses(report) == ["irreversible"], report
    assert "the response has no 'number'" in report["steps"][0]["detail"]
    assert [m for m, _ in agent.state.log[seen:]] == ["GET", "POST"]  # nothing sent back
