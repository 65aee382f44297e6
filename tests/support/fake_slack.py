"""A stateful fake of the Slack Web API (`/api/{method}`), following its documented behaviour:

- every method answers HTTP 200 with `{"ok": true, ...}` or `{"ok": false, "error": "..."}`
  (`channel_not_found`, `message_not_found`, `already_reacted`, `no_reaction`, `no_pin`,
  `already_in_channel`, `not_in_channel`, `already_archived`, `not_authed`, `unknown_method`);
- arguments from the query string, a form body or a JSON body alike; the token as
  `Authorization: Bearer xoxb-...` (or a `token` argument);
- `conversations.history` narrowed by `latest`/`oldest`/`inclusive`/`limit`, newest first;
  `chat.update` marks the message `edited`.
Only what the `slack` pack's rows need is served.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer

TOKEN = "xoxb-fake-token"
BOT = "UBOT"


@dataclass
class SlackState:
    """Channels (with their messages, pins and scheduled messages) by id."""

    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    calls: list[str] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)  # method -> the error it answers
    # conversations.members answers at most this many per page (Slack: "fewer than limit")
    page_size: int = 1000
    # users conversations.kick answers ok for and leaves in the channel (a Slack Connect
    # member an admin policy keeps, say)
    kept_on_kick: set[str] = field(default_factory=set)

    def ts(self) -> str:
        return f"1700000000.{next(self.clock):06d}"

    def channel(self, cid: str, name: str | None = None, members: list[str] | None = None) -> str:
        """A channel that exists before the session."""
        self.channels[cid] = {
            "id": cid,
            "name": name or cid.lower(),
            "is_archived": False,
            "topic": {"value": "", "creator": "", "last_set": 0},
            "purpose": {"value": "", "creator": "", "last_set": 0},
            "members": list(members or [BOT]),
            "messages": [],
            "pins": [],
            "scheduled": [],
        }
        return cid

    def dump(self) -> dict[str, Any]:
        """Everything, as plain data; `edited` marks and `last_set` times left out (Slack sets
        them on every write, the undo included)."""
        out = copy.deepcopy(self.channels)
        for channel in out.values():
            for key in ("topic", "purpose"):
                channel[key].pop("last_set", None)
                channel[key].pop("creator", None)
            for message in channel["messages"]:
                message.pop("edited", None)
        return out


STATE: web.AppKey[SlackState] = web.AppKey("slack", SlackState)


def _fail(error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error})


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields})


def _public(channel: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in channel.items() if k not in ("members", "messages", "pins", "scheduled")
    }


class Api:
    """One handler per Slack method, named with `_` for `.`."""

    def __init__(self, state: SlackState) -> None:
        self.state = state

    def _channel(self, args: dict[str, Any]) -> dict[str, Any] | None:
        return self.state.channels.get(str(args.get("channel", "")))

    def _message(self, channel: dict[str, Any], ts: Any) -> dict[str, Any] | None:
        return next((m for m in channel["messages"] if m["ts"] == ts), None)

    def api_test(self, args: dict[str, Any]) -> web.Response:
        return _ok(args=args)

    def auth_test(self, args: dict[str, Any]) -> web.Response:
        return _ok(user_id=BOT, team="fake")

    def users_lookupByEmail(self, args: dict[str, Any]) -> web.Response:
        if args.get("email") != "a@example.test":
            return _fail("users_not_found")
        return _ok(user={"id": "U1", "name": "ada"})

    def conversations_list(self, args: dict[str, Any]) -> web.Response:
        return _ok(channels=[_public(c) for c in self.state.channels.values()])

    def conversations_info(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        return _ok(channel=_public(channel)) if channel else _fail("channel_not_found")

    def conversations_members(self, args: dict[str, Any]) -> web.Response:
        """Paged as Slack pages it: `limit` (100 by default, at most 1000), `cursor`, and
        `response_metadata.next_cursor` ("" on the last page)."""
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        size = min(int(args.get("limit") or 100), 1000, self.state.page_size)
        start = int(base64.b64decode(args["cursor"]).decode()) if args.get("cursor") else 0
        page = channel["members"][start : start + size]
        rest = start + size < len(channel["members"])
        cursor = base64.b64encode(str(start + size).encode()).decode() if rest else ""
        return _ok(members=page, response_metadata={"next_cursor": cursor})

    def conversations_history(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        latest, oldest = args.get("latest"), args.get("oldest")
        found = []
        for m in sorted(channel["messages"], key=lambda m: m["ts"], reverse=True):
            if m.get("thread_ts") not in (None, m["ts"]):
                continue  # replies live in their thread
            if latest and (m["ts"] > latest or (m["ts"] == latest and not inclusive)):
                continue
            if oldest and (m["ts"] < oldest or (m["ts"] == oldest and not inclusive)):
                continue
            found.append(m)
        limit = int(args.get("limit") or 100)
        return _ok(messages=found[:limit], has_more=len(found) > limit)

    def conversations_replies(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        thread = args.get("ts")
        found = [m for m in channel["messages"] if thread in (m["ts"], m.get("thread_ts"))]
        return _ok(messages=sorted(found, key=lambda m: m["ts"]))

    def chat_postMessage(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        if channel["is_archived"]:
            return _fail("is_archived")
        message: dict[str, Any] = {"type": "message", "user": BOT, "ts": self.state.ts()}
        message["text"] = str(args.get("text") or "")
        if args.get("blocks"):
            blocks = args["blocks"]
            message["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        channel["messages"].append(message)
        return _ok(channel=channel["id"], ts=message["ts"], message=message)

    def chat_update(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        message = self._message(channel, args.get("ts"))
        if message is None:
            return _fail("message_not_found")
        if "text" in args:
            message["text"] = str(args["text"])
        if "blocks" in args:
            blocks = args["blocks"]
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
            if blocks:
                message["blocks"] = blocks
            else:
                message.pop("blocks", None)
        message["edited"] = {"user": BOT, "ts": self.state.ts()}
        return _ok(channel=channel["id"], ts=message["ts"], text=message["text"])

    def chat_delete(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        message = self._message(channel, args.get("ts"))
        if message is None:
            return _fail("message_not_found")
        channel["messages"].remove(message)
        channel["pins"] = [ts for ts in channel["pins"] if ts != message["ts"]]
        return _ok(channel=channel["id"], ts=message["ts"])

    def chat_scheduleMessage(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        scheduled = {
            "id": f"Q{next(self.state.clock)}",
            "channel_id": channel["id"],
            "post_at": int(args.get("post_at") or 0),
            "text": str(args.get("text") or ""),
        }
        channel["scheduled"].append(scheduled)
        return _ok(
            channel=channel["id"],
            scheduled_message_id=scheduled["id"],
            post_at=scheduled["post_at"],
        )

    def chat_deleteScheduledMessage(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        wanted = args.get("scheduled_message_id")
        found = [s for s in channel["scheduled"] if s["id"] == wanted]
        if not found:
            return _fail("invalid_scheduled_message_id")
        channel["scheduled"].remove(found[0])
        return _ok()

    def chat_scheduledMessages_list(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        listed = channel["scheduled"] if channel else []
        return _ok(scheduled_messages=listed)

    def _reacted(self, args: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        channel = self._channel(args)
        if channel is None:
            return None, "channel_not_found"
        message = self._message(channel, args.get("timestamp"))
        return (message, "") if message else (None, "message_not_found")

    def reactions_add(self, args: dict[str, Any]) -> web.Response:
        message, error = self._reacted(args)
        if message is None:
            return _fail(error)
        reactions = message.setdefault("reactions", [])
        found = next((r for r in reactions if r["name"] == args.get("name")), None)
        if found is None:
            reactions.append({"name": args.get("name"), "users": [BOT], "count": 1})
        elif BOT in found["users"]:
            return _fail("already_reacted")
        else:
            found["users"].append(BOT)
            found["count"] += 1
        return _ok()

    def reactions_remove(self, args: dict[str, Any]) -> web.Response:
        message, error = self._reacted(args)
        if message is None:
            return _fail(error)
        reactions = message.get("reactions", [])
        found = next((r for r in reactions if r["name"] == args.get("name")), None)
        if found is None or BOT not in found["users"]:
            return _fail("no_reaction")
        found["users"].remove(BOT)
        found["count"] -= 1
        if not found["users"]:
            reactions.remove(found)
        if not reactions:
            message.pop("reactions", None)
        return _ok()

    def reactions_get(self, args: dict[str, Any]) -> web.Response:
        message, error = self._reacted(args)
        return _ok(type="message", message=message) if message else _fail(error)

    def pins_add(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        ts = args.get("timestamp")
        if self._message(channel, ts) is None:
            return _fail("message_not_found")
        if ts in channel["pins"]:
            return _fail("already_pinned")
        channel["pins"].append(ts)
        return _ok()

    def pins_remove(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        ts = args.get("timestamp")
        if ts not in channel["pins"]:
            return _fail("no_pin")
        channel["pins"].remove(ts)
        return _ok()

    def pins_list(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        items = [
            {"type": "message", "channel": channel["id"], "message": self._message(channel, ts)}
            for ts in channel["pins"]
        ]
        return _ok(items=items)

    def conversations_create(self, args: dict[str, Any]) -> web.Response:
        name = str(args.get("name") or "")
        if any(c["name"] == name for c in self.state.channels.values()):
            return _fail("name_taken")
        cid = self.state.channel(f"C{next(self.state.clock)}", name)
        return _ok(channel=_public(self.state.channels[cid]))

    def conversations_archive(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        if channel["is_archived"]:
            return _fail("already_archived")
        channel["is_archived"] = True
        return _ok()

    def conversations_invite(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        users = [u for u in str(args.get("users") or "").split(",") if u]
        if not users:
            return _fail("no_user")
        if any(u in channel["members"] for u in users):
            return _fail("already_in_channel")
        channel["members"].extend(users)
        return _ok(channel=_public(channel))

    def conversations_kick(self, args: dict[str, Any]) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        user = args.get("user")
        if user not in channel["members"]:
            return _fail("not_in_channel")
        if user not in self.state.kept_on_kick:
            channel["members"].remove(user)
        return _ok()

    def _set(self, args: dict[str, Any], key: str) -> web.Response:
        channel = self._channel(args)
        if channel is None:
            return _fail("channel_not_found")
        channel[key] = {"value": str(args.get(key) or ""), "creator": BOT, "last_set": 1}
        return _ok(channel=_public(channel))

    def conversations_setTopic(self, args: dict[str, Any]) -> web.Response:
        return self._set(args, "topic")

    def conversations_setPurpose(self, args: dict[str, Any]) -> web.Response:
        return self._set(args, "purpose")


async def _arguments(request: web.Request) -> dict[str, Any]:
    args: dict[str, Any] = dict(request.query)
    raw = await request.read()
    if not raw:
        return args
    if request.content_type == "application/json":
        body = json.loads(raw)
        if isinstance(body, dict):
            args.update(body)
    else:
        args.update(parse_qsl(raw.decode(), keep_blank_values=True))
    return args


def create_app(state: SlackState) -> web.Application:
    """The fake Slack Web API over `state`."""
    api = Api(state)

    async def call(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        state.calls.append(method)
        args = await _arguments(request)
        bearer = request.headers.get("Authorization", "")
        if bearer != f"Bearer {TOKEN}" and args.pop("token", None) != TOKEN:
            return _fail("not_authed")
        if method in state.refuse:
            return _fail(state.refuse[method])
        handler = getattr(api, method.replace(".", "_"), None)
        if handler is None:
            return _fail("unknown_method")
        response: web.Response = handler(args)
        return response

    app = web.Application()
    app[STATE] = state
    app.router.add_route("*", "/api/{method}", call)
    return app


def serve(state: SlackState, cert: tuple[Path, Path]) -> ThreadedServer:
    """The fake on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert)).start()
