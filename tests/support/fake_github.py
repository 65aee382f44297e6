"""A stateful fake of the GitHub REST API, as GitHub Enterprise serves it (under `/api/v3`).

It follows GitHub's documented paths, bodies and status codes closely enough for PyGithub:
201 with the created object, 204 for deletes, 404 `{"message": "Not Found"}` for what does not
exist, 422 `Validation Failed` for a label that exists or a contents write with a stale `sha`,
401 without a token. Resource URLs in answers are absolute, on the host the request named.
Only what the `github` pack's rows need is served.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer

PREFIX = "/api/v3"
TOKEN = "ghp_fake_token"


@dataclass
class Repo:
    """One repository's data."""

    owner: str
    name: str
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=lambda: {"refs/heads/main": "a" * 40})
    merged: set[int] = field(default_factory=set)


@dataclass
class GitHubState:
    """Every repository, and the ids handed out so far."""

    repos: dict[str, Repo] = field(default_factory=dict)
    next_id: int = 1000
    login: str = "octo"
    log: list[tuple[str, str]] = field(default_factory=list)
    ignore_patches: bool = False  # answer PATCHes 200 without applying them (a faulty replica)
    omit: set[str] = field(default_factory=set)  # fields left out of a created issue's answer
    token: str = TOKEN  # the only token it accepts (`token X` or `Bearer X`)

    def repo(self, owner: str, name: str) -> Repo:
        """The repository, created empty when missing."""
        return self.repos.setdefault(f"{owner}/{name}", Repo(owner, name))

    def dump(self) -> dict[str, Any]:
        """Everything, as plain data: compare it before a session and after its rollback."""
        out = {}
        for key, r in sorted(self.repos.items()):
            out[key] = {
                "issues": copy.deepcopy(r.issues),
                "comments": copy.deepcopy(r.comments),
                "labels": copy.deepcopy(r.labels),
                "files": {p: c.decode() for p, c in r.files.items()},
                "refs": dict(r.refs),
                "merged": sorted(r.merged),
            }
        for repo in out.values():  # GitHub bumps these on every write, as it should
            for thing in (*repo["issues"].values(), *repo["comments"].values()):
                thing.pop("updated_at", None)
                thing.pop("closed_at", None)
        return out


STATE: web.AppKey[GitHubState] = web.AppKey("github", GitHubState)


def blob_sha(content: bytes) -> str:
    """Git's blob sha: what GitHub answers as a file's `sha`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _not_found() -> web.Response:
    return web.json_response({"message": "Not Found", "status": "404"}, status=404)


def _invalid(message: str) -> web.Response:
    return web.json_response(
        {"message": "Validation Failed", "errors": [{"message": message}], "status": "422"},
        status=422,
    )


def _api(request: web.Request, path: str) -> str:
    return f"https://{request.host}{PREFIX}{path}"


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    return json.loads(raw) if raw else {}


@web.middleware
async def _auth(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[STATE]
    state.log.append((request.method, request.path))
    token = state.token
    if request.headers.get("Authorization", "") not in (f"token {token}", f"Bearer {token}"):
        return web.json_response({"message": "Requires authentication"}, status=401)
    return await handler(request)


def _repo_of(request: web.Request) -> Repo | None:
    state = request.app[STATE]
    return state.repos.get(f"{request.match_info['owner']}/{request.match_info['repo']}")


def _repo_json(request: web.Request, r: Repo) -> dict[str, Any]:
    return {
        "id": abs(hash(r.name)) % 10**6,
        "name": r.name,
        "full_name": f"{r.owner}/{r.name}",
        "owner": {"login": r.owner, "type": "User"},
        "url": _api(request, f"/repos/{r.owner}/{r.name}"),
        "default_branch": "main",
        "private": False,
    }


async def get_user(request: web.Request) -> web.Response:
    login = request.app[STATE].login
    return web.json_response({"login": login, "url": _api(request, f"/users/{login}")})


async def get_repo(request: web.Request) -> web.Response:
    r = _repo_of(request)
    return web.json_response(_repo_json(request, r)) if r else _not_found()


async def delete_repo(request: web.Request) -> web.Response:
    state = request.app[STATE]
    key = f"{request.match_info['owner']}/{request.match_info['repo']}"
    if key not in state.repos:
        return _not_found()
    del state.repos[key]
    return web.Response(status=204)


async def create_repo(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await _body(request)
    owner = request.match_info.get("org", state.login)
    if f"{owner}/{body.get('name')}" in state.repos:
        return _invalid("name already exists on this account")
    r = state.repo(owner, str(body["name"]))
    return web.json_response(_repo_json(request, r), status=201)


def _issue_json(request: web.Request, r: Repo, issue: dict[str, Any]) -> dict[str, Any]:
    base = f"/repos/{r.owner}/{r.name}/issues/{issue['number']}"
    out = dict(issue)
    out["url"] = _api(request, base)
    out["labels"] = [r.labels.get(n, {"name": n}) for n in issue["labels"]]
    out["assignees"] = [{"login": a} for a in issue["assignees"]]
    out["assignee"] = out["assignees"][0] if out["assignees"] else None
    out["repository_url"] = _api(request, f"/repos/{r.owner}/{r.name}")
    return out


def _new_number(state: GitHubState) -> int:
    state.next_id += 1
    return state.next_id


async def create_issue(request: web.Request, *, pull: bool = False) -> web.Response:
    r = _repo_of(request)
    if r is None:
        return _not_found()
    body = await _body(request)
    if not body.get("title"):
        return _invalid("title is missing")
    number = len(r.issues) + 1
    issue = {
        "number": number,
        "id": _new_number(request.app[STATE]),
        "title": body["title"],
        "body": body.get("body"),
        "state": "open",
        "state_reason": None,
        "labels": [str(x) for x in body.get("labels") or []],
        "assignees": [str(x) for x in body.get("assignees") or []],
        "milestone": None,
        "updated_at": "2026-01-01T00:00:00Z",
    }
    for name in issue["labels"]:
        r.labels.setdefault(name, _label(request, r, name, "ededed"))
    if pull:
        issue["head"] = {"ref": body.get("head")}
        issue["base"] = {"ref": body.get("base")}
        issue["pull_request"] = True
    r.issues[number] = issue
    out = _issue_json(request, r, issue)
    if pull:
        out["url"] = _api(request, f"/repos/{r.owner}/{r.name}/pulls/{number}")
    for name in request.app[STATE].omit:
        out.pop(name, None)
    return web.json_response(out, status=201)


async def create_pull(request: web.Request) -> web.Response:
    return await create_issue(request, pull=True)


def _issue_of(request: web.Request) -> tuple[Repo | None, dict[str, Any] | None]:
    r = _repo_of(request)
    if r is None:
        return None, None
    return r, r.issues.get(int(request.match_info["number"]))


async def get_issue(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    if r is None or issue is None:
        return _not_found()
    out = _issue_json(request, r, issue)
    if "/pulls/" in request.path:
        out["url"] = _api(request, f"/repos/{r.owner}/{r.name}/pulls/{issue['number']}")
    return web.json_response(out)


async def patch_issue(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    if r is None or issue is None:
        return _not_found()
    body = await _body(request)
    if request.app[STATE].ignore_patches:
        return await get_issue(request)
    for key in ("title", "body"):
        if key in body:
            issue[key] = body[key]
    if "state" in body:
        if body["state"] not in ("open", "closed"):
            return _invalid("state is not open or closed")
        reason = body.get("state_reason")
        if body["state"] == "closed":
            issue["state_reason"] = reason or "completed"
        elif "state_reason" in body:
            issue["state_reason"] = reason
        elif issue["state"] == "closed":
            issue["state_reason"] = "reopened"
        issue["state"] = body["state"]
    elif "state_reason" in body:
        issue["state_reason"] = body["state_reason"]
    if "labels" in body:
        issue["labels"] = [str(x) for x in body["labels"] or []]
    if "assignees" in body:
        issue["assignees"] = [str(x) for x in body["assignees"] or []]
    if "milestone" in body:
        issue["milestone"] = body["milestone"]
    issue["updated_at"] = "2026-01-02T00:00:00Z"
    return await get_issue(request)


async def merge_pull(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    if r is None or issue is None:
        return _not_found()
    r.merged.add(issue["number"])
    issue["state"] = "closed"
    return web.json_response({"merged": True, "sha": "b" * 40, "message": "merged"})


def _comment_json(request: web.Request, r: Repo, comment: dict[str, Any]) -> dict[str, Any]:
    out = dict(comment)
    out["url"] = _api(request, f"/repos/{r.owner}/{r.name}/issues/comments/{comment['id']}")
    return out


async def create_comment(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    if r is None or issue is None:
        return _not_found()
    body = await _body(request)
    comment = {
        "id": _new_number(request.app[STATE]),
        "body": body.get("body"),
        "issue_number": issue["number"],
        "updated_at": "2026-01-01T00:00:00Z",
    }
    r.comments[comment["id"]] = comment
    return web.json_response(_comment_json(request, r, comment), status=201)


def _comment_of(request: web.Request) -> tuple[Repo | None, dict[str, Any] | None]:
    r = _repo_of(request)
    if r is None:
        return None, None
    return r, r.comments.get(int(request.match_info["id"]))


async def get_comment(request: web.Request) -> web.Response:
    r, comment = _comment_of(request)
    if r is None or comment is None:
        return _not_found()
    return web.json_response(_comment_json(request, r, comment))


async def patch_comment(request: web.Request) -> web.Response:
    r, comment = _comment_of(request)
    if r is None or comment is None:
        return _not_found()
    body = await _body(request)
    if "body" in body:
        comment["body"] = body["body"]
    comment["updated_at"] = "2026-01-02T00:00:00Z"
    return web.json_response(_comment_json(request, r, comment))


async def delete_comment(request: web.Request) -> web.Response:
    r, comment = _comment_of(request)
    if r is None or comment is None:
        return _not_found()
    del r.comments[comment["id"]]
    return web.Response(status=204)


def _label(request: web.Request, r: Repo, name: str, color: str) -> dict[str, Any]:
    return {
        "name": name,
        "color": color,
        "url": _api(request, f"/repos/{r.owner}/{r.name}/labels/{name}"),
    }


async def create_label(request: web.Request) -> web.Response:
    r = _repo_of(request)
    if r is None:
        return _not_found()
    body = await _body(request)
    name = str(body.get("name") or "")
    if not name or name in r.labels:
        return _invalid("already_exists" if name else "name is missing")
    r.labels[name] = _label(request, r, name, str(body.get("color") or "ededed"))
    return web.json_response(r.labels[name], status=201)


async def get_label(request: web.Request) -> web.Response:
    r = _repo_of(request)
    label = r.labels.get(request.match_info["name"]) if r else None
    return web.json_response(label) if label else _not_found()


async def delete_label(request: web.Request) -> web.Response:
    r = _repo_of(request)
    name = request.match_info["name"]
    if r is None or name not in r.labels:
        return _not_found()
    del r.labels[name]
    for issue in r.issues.values():
        issue["labels"] = [n for n in issue["labels"] if n != name]
    return web.Response(status=204)


async def issue_labels(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    if r is None or issue is None:
        return _not_found()
    if request.method == "POST":
        body = await _body(request)
        names = body.get("labels") if isinstance(body, dict) else body
        for item in names or []:
            name = str(item.get("name") if isinstance(item, dict) else item)
            r.labels.setdefault(name, _label(request, r, name, "ededed"))
            if name not in issue["labels"]:
                issue["labels"].append(name)
    return web.json_response([r.labels[n] for n in issue["labels"]])


async def remove_issue_label(request: web.Request) -> web.Response:
    r, issue = _issue_of(request)
    name = request.match_info["name"]
    if r is None or issue is None or name not in issue["labels"]:
        return web.json_response({"message": "Label does not exist"}, status=404)
    issue["labels"].remove(name)
    return web.json_response([r.labels[n] for n in issue["labels"]])


def _file_json(request: web.Request, r: Repo, path: str) -> dict[str, Any]:
    content = r.files[path]
    encoded = base64.encodebytes(content).decode()  # GitHub wraps its base64 at 60/76 columns
    return {
        "type": "file",
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "sha": blob_sha(content),
        "size": len(content),
        "encoding": "base64",
        "content": encoded,
        "url": _api(request, f"/repos/{r.owner}/{r.name}/contents/{path}"),
    }


async def contents(request: web.Request) -> web.Response:
    r = _repo_of(request)
    path = request.match_info["path"]
    if r is None:
        return _not_found()
    if request.method == "GET":
        if path in r.files:
            return web.json_response(_file_json(request, r, path))
        listing = [
            _file_json(request, r, p) for p in r.files if p.startswith(path.rstrip("/") + "/")
        ]
        return web.json_response(listing) if listing else _not_found()
    body = await _body(request)
    current = blob_sha(r.files[path]) if path in r.files else None
    if request.method == "DELETE":
        if current is None:
            return _not_found()
        if body.get("sha") != current:
            return web.json_response({"message": "sha does not match"}, status=409)
        del r.files[path]
        return web.json_response({"content": None, "commit": {"sha": "c" * 40}})
    if current is not None and body.get("sha") != current:
        return _invalid('"sha" wasn\'t supplied' if not body.get("sha") else "sha does not match")
    r.files[path] = base64.b64decode(body.get("content") or "")
    status = 200 if current is not None else 201
    return web.json_response(
        {"content": _file_json(request, r, path), "commit": {"sha": "c" * 40}}, status=status
    )


async def create_ref(request: web.Request) -> web.Response:
    r = _repo_of(request)
    if r is None:
        return _not_found()
    body = await _body(request)
    ref = str(body.get("ref") or "")
    if not ref.startswith("refs/") or ref.count("/") < 2 or ref in r.refs:
        return _invalid("Reference already exists" if ref in r.refs else "invalid ref")
    r.refs[ref] = str(body.get("sha"))
    return web.json_response(_ref_json(request, r, ref), status=201)


def _ref_json(request: web.Request, r: Repo, ref: str) -> dict[str, Any]:
    return {
        "ref": ref,
        "url": _api(request, f"/repos/{r.owner}/{r.name}/git/{ref}"),
        "object": {"sha": r.refs[ref], "type": "commit"},
    }


async def get_ref(request: web.Request) -> web.Response:
    r = _repo_of(request)
    ref = "refs/" + request.match_info["ref"]
    if r is None or ref not in r.refs:
        return _not_found()
    return web.json_response(_ref_json(request, r, ref))


async def delete_ref(request: web.Request) -> web.Response:
    r = _repo_of(request)
    ref = "refs/" + request.match_info["ref"]
    if r is None or ref not in r.refs:
        return web.json_response({"message": "Reference does not exist"}, status=422)
    del r.refs[ref]
    return web.Response(status=204)


def create_app(state: GitHubState) -> web.Application:
    """The fake GitHub API over `state`."""
    app = web.Application(middlewares=[_auth])
    app[STATE] = state
    repo = PREFIX + "/repos/{owner}/{repo}"
    app.add_routes(
        [
            web.get(PREFIX + "/user", get_user),
            web.post(PREFIX + "/user/repos", create_repo),
            web.post(PREFIX + "/orgs/{org}/repos", create_repo),
            web.get(repo, get_repo),
            web.delete(repo, delete_repo),
            web.post(repo + "/issues", create_issue),
            web.get(repo + "/issues/comments/{id}", get_comment),
            web.patch(repo + "/issues/comments/{id}", patch_comment),
            web.delete(repo + "/issues/comments/{id}", delete_comment),
            web.get(repo + "/issues/{number}", get_issue),
            web.patch(repo + "/issues/{number}", patch_issue),
            web.post(repo + "/issues/{number}/comments", create_comment),
            web.get(repo + "/issues/{number}/labels", issue_labels),
            web.post(repo + "/issues/{number}/labels", issue_labels),
            web.delete(repo + "/issues/{number}/labels/{name}", remove_issue_label),
            web.post(repo + "/labels", create_label),
            web.get(repo + "/labels/{name}", get_label),
            web.delete(repo + "/labels/{name}", delete_label),
            web.post(repo + "/pulls", create_pull),
            web.get(repo + "/pulls/{number}", get_issue),
            web.patch(repo + "/pulls/{number}", patch_issue),
            web.put(repo + "/pulls/{number}/merge", merge_pull),
            web.route("*", repo + "/contents/{path:.+}", contents),
            web.post(repo + "/git/refs", create_ref),
            web.get(repo + "/git/ref/{ref:.+}", get_ref),
            web.delete(repo + "/git/refs/{ref:.+}", delete_ref),
        ]
    )
    return app


def pack_config(pack: str, port: int) -> dict[str, Any]:
    """The config that puts the built-in pack `pack` (alone) on a fake on 127.0.0.1:`port`."""
    return {"packs": [{"name": pack, "hosts": [f"127.0.0.1:{port}"]}]}


def serve(state: GitHubState, cert: tuple[Path, Path]) -> ThreadedServer:
    """The fake on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert)).start()
