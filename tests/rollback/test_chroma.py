"""Rollback of writes to a real Chroma server (the vector database, from PyPI) made by
Chroma's own Python client through undoproxy, with zero rules: only the `chroma` pack.

Before each write undoproxy reads the records it names, embeddings, metadata and documents
included (`/get`, a POST); rollback puts each back and reads it back record by record. The
test reads every record directly before and after.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.rollback.helpers import rollback_ends
from tests.support.proc import Undoproxy
from tests.support.rpcservers import Chroma


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chroma]:
    server = Chroma(tmp_path_factory.mktemp("chroma"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("chroma-proxy"), {"packs": ["chroma"]}).start()
    yield instance
    instance.stop()


SEED = """
c = client.create_collection(sys.argv[1] if len(sys.argv) > 1 else NAME, metadata={"team": "a"})
c.add(ids=["a", "b", "c"], embeddings=[[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]],
      metadatas=[{"src": "wiki", "n": 1}, {"src": "mail"}, None],
      documents=["alpha", "beta", None])
"""


def test_records_and_collections_written_by_the_chroma_client_are_undone(
    chroma: Chroma, up: Undoproxy, session_id: str
) -> None:
    name = f"docs-{session_id}"
    chroma.run_client(f"NAME = {name!r}\n" + SEED)
    before = chroma.records(name)
    agent = f"""
c = client.get_collection({name!r})
c.add(ids=["d"], embeddings=[[1.0, 1.0, 1.0]], metadatas=[{{"src": "agent"}}], documents=["new"])
c.upsert(ids=["a", "e"], embeddings=[[9.0, 9.0, 9.0], [2.0, 2.0, 2.0]],
         metadatas=[{{"src": "agent", "extra": True}}, {{"k": 1}}], documents=["A!", "E"])
c.update(ids=["b"], embeddings=[[0.5, 0.5, 0.5]], metadatas=[{{"src": "changed", "added": 3}}],
         documents=["B!"])
c.delete(ids=["c"])
c.delete(where={{"src": "changed"}})
c.modify(name={name + "-renamed"!r}, metadata={{"team": "b"}})
client.create_collection({name + "-scratch"!r})
"""
    chroma.run_client(agent, up.proxy_url(session_id))
    assert chroma.records(f"{name}-renamed") != before

    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 7)
    assert chroma.records(name) == before
    got = requests.get(f"{chroma.api}/collections/{name}", timeout=10).json()
    assert got["metadata"] == {"team": "a"}
    missing = requests.get(f"{chroma.api}/collections/{name}-scratch", timeout=10)
    assert missing.status_code == 404
