"""A blob store that keeps objects of any size on disk and streams them both ways, as an
object store does: `PUT /blobs/{name}` (streamed to a file), `GET /blobs/{name}` (streamed,
with Content-Length, no ETag: the rollback's drift check then hashes what it reads),
`DELETE /blobs/{name}`. `SEEN` counts the bytes of every PUT by path, `READS` lists the path
of every GET answered (the after-read of a write shows there)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from aiohttp import web

ROOT: web.AppKey[Path] = web.AppKey("blob_root", Path)
SEEN: web.AppKey[dict[str, int]] = web.AppKey("blob_seen", dict)
READS: web.AppKey[list[str]] = web.AppKey("blob_reads", list)


def _path(request: web.Request) -> Path:
    name = request.match_info["name"]
    if "/" in name or name.startswith("."):
        raise web.HTTPBadRequest(text="bad name")
    return request.app[ROOT] / name


async def get(request: web.Request) -> web.StreamResponse:
    path = _path(request)
    if not path.is_file():
        raise web.HTTPNotFound()
    size = path.stat().st_size
    response = web.StreamResponse(
        headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    )
    await response.prepare(request)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            await response.write(chunk)
    await response.write_eof()
    request.app[READS].append(request.path)
    return response


async def put(request: web.Request) -> web.Response:
    path = _path(request)
    existed = path.exists()
    part = path.with_suffix(".part")
    size = 0
    with part.open("wb") as f:
        while chunk := await request.content.read(1 << 20):
            f.write(chunk)
            size += len(chunk)
    part.replace(path)
    request.app[SEEN][request.path] = size
    return web.json_response({"size": size}, status=200 if existed else 201)


async def delete(request: web.Request) -> web.Response:
    path = _path(request)
    if not path.exists():
        raise web.HTTPNotFound()
    path.unlink()
    return web.Response(status=204)


def create_app(root: Path) -> web.Application:
    """The store, keeping its blobs under `root`."""
    app = web.Application(client_max_size=1 << 40)
    app[ROOT], app[SEEN], app[READS] = root, {}, []
    root.mkdir(parents=True, exist_ok=True)
    app.router.add_get("/blobs/{name}", get)
    app.router.add_put("/blobs/{name}", put)
    app.router.add_delete("/blobs/{name}", delete)
    return app


def write_blob(root: Path, name: str, size: int, seed: bytes) -> str:
    """Put a blob of `size` pseudo-random bytes straight into the store (not through any
    proxy); its SHA-256."""
    digest = hashlib.sha256()
    block = hashlib.sha256(seed).digest() * 32768  # 1 MiB
    with (root / name).open("wb") as f:
        left = size
        while left:
            piece = block[: min(left, len(block))]
            f.write(piece)
            digest.update(piece)
            left -= len(piece)
            block = hashlib.sha256(block[:32]).digest() * 32768
    return digest.hexdigest()


def sha256_of(root: Path, name: str) -> str:
    """The SHA-256 of a stored blob."""
    digest = hashlib.sha256()
    with (root / name).open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
