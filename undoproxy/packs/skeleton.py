"""`undoproxy packs new NAME`: the commented skeleton of a pack of the user's (docs/packs.md,
"Write a pack in ten minutes").

The skeleton is a working pack for a made-up API on `api.example.com`: a user replaces the
host, the paths and the bodies with their API's, deletes the rules it does not have, and proves
each undo with `undoproxy packs test FILE --against URL`, which runs the `cases:` at its end.
"""

from __future__ import annotations

import re
from pathlib import Path

from undoproxy.errors import UndoproxyError
from undoproxy.packs import builtin_names

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")

SKELETON = """\
# The {name} pack: what undoproxy knows about one API (docs/packs.md#write-a-pack-in-ten-minutes).
# Load it with `include: [{path}]` in config.yaml; its rules are called {name}/RULE and win
# over the built-in packs. Prove it with:
#   undoproxy packs test {path} --against https://YOUR-SERVER -H 'Authorization: Bearer ...'
name: {name}
description: what this API is, in a few words
hosts: [{host}]            # the API's host(s); a rule may name its own match.host
rules:
  # 1. Reads that are POSTs (searches, queries, RPC getters): kind read. A read is journaled,
  #    never held and never undone. (GET, HEAD and OPTIONS are reads already.)
  - name: search-items
    match: {{method: POST, path: /items/search}}
    kind: read
    risk: low

  # 2. REST writes: name the undo. `{{id}}` captures one path segment.
  - name: create-item
    match: {{method: POST, path: /items}}
    risk: low
    compensate: delete-created   # DELETE what it made: its 201 Location, else /items/<id>
  - name: update-item
    match: {{method: [PUT, PATCH], path: "/items/{{id}}"}}
    risk: medium
    compensate: restore          # GET it before, PUT that back (read back to prove it)
  - name: delete-item
    match: {{method: DELETE, path: "/items/{{id}}"}}
    risk: medium
    compensate: recreate         # GET it before, PUT it back (POST to /items if PUT is refused)

  # 3. An RPC call: one POST whose body names the action. Read the target before it (any
  #    request that only reads), undo from that read (${{snapshot.body...}} is its answer), and
  #    undoproxy reads it again after the undo to prove it.
  - name: set-value
    match: {{method: POST, path: /rpc, body: {{"$.method": set}}}}
    risk: medium
    compensate:
      read:
        method: POST
        url: /rpc
        body: {{method: get, key: "${{request.body.key}}"}}
        absent: {{"$.value": {{exists: false}}}}   # the answer when nothing is there
        compare: ["$.value"]                    # what must read as before after the undo
      undo:                                     # it was there: put the old value back
        method: POST
        url: /rpc
        body: {{method: set, key: "${{request.body.key}}", value: "${{snapshot.body.value}}"}}
        repeatable: true                        # sending it twice is the same as once
      undo_absent:                              # it was not: delete what the step made
        method: POST
        url: /rpc
        body: {{method: delete, key: "${{request.body.key}}"}}
        repeatable: true

  # 4. What cannot be undone: say so, and why. `action: hold` makes a person approve it first.
  - name: send-message
    match: {{method: POST, path: /messages}}
    risk: high
    action: hold
    compensate: none
    reason: a message sent cannot be unsent

# What `undoproxy packs test` runs: each case is sent through undoproxy to the server
# (--against), rolled back, and judged by what rollback read back. `undoproxy packs record
# SESSION` writes these from a session you ran against a real server.
cases:
  - name: create an item
    request: {{method: POST, path: /items, json: {{title: hello}}}}
    expect: restored             # restored | irreversible
    check: [{{method: GET, path: /items}}]   # read straight from the server before and after:
                                           # must be the same (ignore: [fields] that always change)
  - name: update an item
    setup: [{{method: PUT, path: /items/1, json: {{title: first}}}}]   # sent straight to the server
    request: {{method: PATCH, path: /items/1, json: {{title: changed}}}}
    expect: restored
    check: [{{method: GET, path: /items/1}}]
"""


def skeleton(name: str, path: str, host: str = "api.example.com") -> str:
    """The skeleton's text for a pack called `name`, loaded from `path`."""
    return SKELETON.format(name=name, path=path, host=host)


def write_skeleton(name: str, path: Path | None, host: str | None, *, force: bool) -> Path:
    """Write the skeleton to `path` (default ./packs/NAME.yaml); raises UndoproxyError."""
    if not _NAME.match(name):
        raise UndoproxyError(
            f"a pack name is a word of letters, digits, - and _ (at most 63), got {name!r}"
        )
    if name in builtin_names():
        raise UndoproxyError(f"{name!r} is a built-in pack: call yours something else")
    target = path or Path("packs") / f"{name}.yaml"
    if target.exists() and not force:
        raise UndoproxyError(f"{target} exists; --force overwrites it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(skeleton(name, str(target), host or "api.example.com"), encoding="utf-8")
    return target
