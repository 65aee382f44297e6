"""API packs: named compensators that know one API's inverse operations (one module per API).

Each builder takes the step's Facts (after a successful response) and returns the inverse
request, or raises Irreversible saying why it cannot (NothingToUndo when the API reported a
failure inside a 2xx answer). See `github.py`, `stripe.py` and `slack.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from undoproxy.compensators import github, s3, slack, stripe
from undoproxy.compensators.model import Facts

PACK_BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    **github.BUILDERS,
    **stripe.BUILDERS,
    **slack.BUILDERS,
    **s3.BUILDERS,
}

# Packs that read more than the request's own URL before forwarding: name -> the URLs to GET,
# from (method, url, body); raises Irreversible when the request cannot be undone at all.
PACK_SNAPSHOTS: dict[str, Callable[[str, str, bytes], list[str]]] = {**s3.SNAPSHOTS}
