"""Rollback of notebook and file writes through a real Jupyter Server's contents API (PyPI
jupyter_server), with zero rules: only the `jupyter` pack.

A save is answered with the file's model but no content: undoproxy reads the file itself
before and after, so a restored notebook is never a false `conflict`; a rename is undone by
renaming back. The test reads the server's root directory from the disk before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.rollback.helpers import rollback_ends
from tests.support.proc import Undoproxy
from tests.support.rpcservers import Jupyter

NOTEBOOK = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {},
    "cells": [
        {
            "cell_type": "code",
            "id": "c1",
            "metadata": {},
            "source": "print('hi')",
            "outputs": [],
            "execution_count": None,
        }
    ],
}


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jupyter]:
    server = Jupyter(tmp_path_factory.mktemp("jupyter"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("jupyter-proxy"), {"packs": ["jupyter"]}).start()
    yield instance
    instance.stop()


def put(
    session: requests.Session | Any, jupyter: Jupyter, path: str, model: dict[str, Any]
) -> None:
    r = session.put(f"{jupyter.api}/contents/{path}", json=model, timeout=30)
    assert r.status_code in (200, 201), r.text


@pytest.fixture
def folder(jupyter: Jupyter, session_id: str) -> str:
    """A folder of the test's own, with a text file, a notebook and a subfolder."""
    direct = requests.Session()
    direct.headers.update(jupyter.auth)
    put(direct, jupyter, session_id, {"type": "directory"})
    put(
        direct,
        jupyter,
        f"{session_id}/notes.txt",
        {"type": "file", "format": "text", "content": "hello\n"},
    )
    put(direct, jupyter, f"{session_id}/analysis.ipynb", {"type": "notebook", "content": NOTEBOOK})
    put(direct, jupyter, f"{session_id}/data", {"type": "directory"})
    put(
        direct,
        jupyter,
        f"{session_id}/data/t.csv",
        {"type": "file", "format": "text", "content": "a,b\n"},
    )
    return session_id


def test_saves_renames_deletes_and_creations_are_undone(
    jupyter: Jupyter, up: Undoproxy, folder: str, session_id: str
) -> None:
    before = jupyter.tree()
    agent = up.agent(session_id, headers=jupyter.auth)
    base = f"{jupyter.api}/contents/{folder}"
    put(
        agent,
        jupyter,
        f"{folder}/notes.txt",
        {"type": "file", "format": "text", "content": "agent\n"},
    )
    changed = {**NOTEBOOK, "cells": [{**NOTEBOOK["cells"][0], "source": "print('agent')"}]}
    put(agent, jupyter, f"{folder}/analysis.ipynb", {"type": "notebook", "content": changed})
    put(agent, jupyter, f"{folder}/new.md", {"type": "file", "format": "text", "content": "# new"})
    r = agent.patch(f"{base}/analysis.ipynb", json={"path": f"{folder}/renamed.ipynb"}, timeout=30)
    assert r.status_code == 200, r.text
    assert agent.delete(f"{base}/data/t.csv", timeout=30).status_code == 204
    assert agent.post(base, json={"type": "notebook"}, timeout=30).status_code == 201
    assert (
        agent.post(base, json={"copy_from": f"{folder}/notes.txt"}, timeout=30).status_code == 201
    )
    put(agent, jupyter, f"{folder}/made", {"type": "directory"})
    assert jupyter.tree() != before

    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 8)
    assert jupyter.tree() == before


def test_a_file_saved_again_by_someone_else_is_not_overwritten(
    jupyter: Jupyter, up: Undoproxy, folder: str, session_id: str
) -> None:
    agent = up.agent(session_id, headers=jupyter.auth)
    put(
        agent,
        jupyter,
        f"{folder}/notes.txt",
        {"type": "file", "format": "text", "content": "agent\n"},
    )
    direct = requests.Session()
    direct.headers.update(jupyter.auth)
    put(
        direct,
        jupyter,
        f"{folder}/notes.txt",
        {"type": "file", "format": "text", "content": "a person\n"},
    )
    report = up.rollback(session_id)
    assert report["steps"][0]["status"] in ("conflict", "failed"), report
    assert (jupyter.dir / "root" / folder / "notes.txt").read_text() == "a person\n"


def test_under_a_base_url_a_rename_is_renamed_back_there(
    tmp_path_factory: pytest.TempPathFactory, up: Undoproxy, session_id: str
) -> None:
    """JupyterHub serves each user's server under /user/NAME/: the undo of a rename goes to
    the new path under that prefix, never to a bare /api/contents/."""
    hub = Jupyter(tmp_path_factory.mktemp("hub"), base="/user/ada/")
    hub.start()
    try:
        direct = requests.Session()
        direct.headers.update(hub.auth)
        put(direct, hub, "plan.txt", {"type": "file", "format": "text", "content": "v1\n"})
        before = hub.tree()
        agent = up.agent(session_id, headers=hub.auth)
        put(agent, hub, "plan.txt", {"type": "file", "format": "text", "content": "v2\n"})
        renamed = agent.patch(f"{hub.api}/contents/plan.txt", json={"path": "final.txt"})
        assert renamed.status_code == 200, renamed.text
        rollback_ends(up, session_id, "rolled_back", ["compensated", "compensated"])
        assert hub.tree() == before
    finally:
        hub.stop()
