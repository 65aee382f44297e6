"""`undoproxy packs`: list the packs, and the kit that teaches undoproxy a new API.

undoproxy packs                       the built-in packs
undoproxy packs NAME                  one pack's rules
undoproxy packs new NAME [--out FILE] [--host HOST]
                                      a commented skeleton (./packs/NAME.yaml)
undoproxy packs record SESSION [--out FILE]
                                      a session run against a real server, as test cases
undoproxy packs test PACK --against URL [--cases FILE] [-H 'Name: value'] [-c config.yaml]
                                      run each case through undoproxy, roll it back, and
                                      show per case: restored / not restored / irreversible,
                                      with the evidence (exit 0 only when all are as expected)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import quote

import yaml

from undoproxy.cli.options import add_admin, client
from undoproxy.cli.output import out, table
from undoproxy.errors import UndoproxyError
from undoproxy.packs import cases as casefile
from undoproxy.packs import kit

KIT_COMMANDS = ("new", "record", "test")


def cmd_packs(args: argparse.Namespace) -> int:
    """List the built-in API packs, or (with NAME) one pack's rules; `packs new|record|test`
    write, record and prove a pack of your own (see docs/packs.md)."""
    if args.name in KIT_COMMANDS:
        sub = _parser(args.name).parse_args(args.rest)
        return int(sub.func(sub))
    if args.rest:
        raise UndoproxyError(f"unexpected arguments: {' '.join(args.rest)}")
    from undoproxy.packs.listing import describe_pack, list_packs

    out(describe_pack(args.name) if args.name else list_packs())
    return 0


def _parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"undoproxy packs {name}")
    if name == "new":
        p.description = cmd_new.__doc__
        p.add_argument("pack", metavar="NAME", help="the pack's name (a word)")
        p.add_argument("--out", type=Path, metavar="FILE", help="default ./packs/NAME.yaml")
        p.add_argument("--host", help="the API's host (default api.example.com)")
        p.add_argument("--force", action="store_true", help="overwrite an existing file")
        p.set_defaults(func=cmd_new)
    elif name == "record":
        p.description = cmd_record.__doc__
        p.add_argument("session", metavar="SESSION")
        p.add_argument("--out", type=Path, metavar="FILE", help="default: print it")
        add_admin(p)
        p.set_defaults(func=cmd_record)
    else:
        p.description = cmd_test.__doc__
        p.add_argument("pack", metavar="PACK", help="a pack file, or a built-in pack's name")
        p.add_argument("--against", required=True, metavar="URL", help="the server to test on")
        p.add_argument(
            "--cases",
            type=Path,
            metavar="FILE",
            help="the cases (default: the pack file's cases:, else PACK.cases.yaml beside it)",
        )
        p.add_argument(
            "-H",
            "--header",
            action="append",
            default=[],
            metavar="'Name: value'",
            help="sent with every request (credentials; repeatable)",
        )
        p.add_argument(
            "-c", "--config", type=Path, metavar="FILE", help="take signing: from this config"
        )
        p.add_argument(
            "--insecure", action="store_true", help="accept the server's self-signed certificate"
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=cmd_test)
    return p


def cmd_new(args: argparse.Namespace) -> int:
    """Write a commented skeleton of a pack: rules for reads, REST writes, an RPC call and an
    irreversible one, and test cases; edit it for your API, then `undoproxy packs test`."""
    from undoproxy.packs.skeleton import write_skeleton

    path = write_skeleton(args.pack, args.out, args.host, force=args.force)
    out(f"wrote {path}")
    out("  1. edit it: hosts, paths and bodies of your API (docs/packs.md)")
    out(f"  2. prove it: undoproxy packs test {path} --against https://YOUR-SERVER")
    out(f"  3. use it: include: [{path}] in config.yaml")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Turn a session run against a real server into test cases: one per mutation, with the
    request it sent (credentials left out: give them to `packs test` with -H) and the undo
    expected (restored when undoproxy recorded one, else irreversible)."""
    admin = client(args)
    path = f"/api/sessions/{quote(args.session, safe='')}"
    admin.call("GET", f"{path}?limit=1")  # an unknown session: said plainly
    steps = list(admin.pages(path, "steps"))
    text = yaml.safe_dump(casefile.record(steps, args.session), sort_keys=False, width=100)
    header = (
        f"# Test cases recorded from session {args.session} by `undoproxy packs record`.\n"
        "# Add setup: (requests sent straight to the server first) and check: (reads that\n"
        "# must answer the same before the request and after the rollback), then run:\n"
        "#   undoproxy packs test PACK --cases THIS-FILE --against URL\n"
    )
    if args.out is None:
        sys.stdout.write(header + text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + text, encoding="utf-8")
        out(f"wrote {args.out}: {text.count('- name:')} cases")
    return 0


def _cases_for(args: argparse.Namespace) -> list[casefile.Case]:
    if args.cases is not None:
        source = args.cases
    else:
        pack = Path(args.pack)
        doc = yaml.safe_load(pack.read_text(encoding="utf-8")) if pack.is_file() else None
        if isinstance(doc, dict) and doc.get("cases"):
            return casefile.parse_cases(doc, str(pack))
        source = pack.with_name(pack.stem + ".cases.yaml")
        if not source.is_file():
            raise UndoproxyError(
                f"no cases for {args.pack}: give --cases FILE, or a cases: list in the pack"
            )
    return casefile.parse_cases(yaml.safe_load(source.read_text(encoding="utf-8")), str(source))


def cmd_test(args: argparse.Namespace) -> int:
    """Run each case of a pack through undoproxy against a real server, roll it back, and
    show per case whether it was restored, not restored or irreversible, with the evidence."""
    headers = {}
    for item in args.header:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise UndoproxyError(f"--header must be 'Name: value', got {item!r}")
        headers[name.strip()] = value.strip()
    cases = _cases_for(args)
    outcomes = kit.run(
        args.pack,
        cases,
        args.against,
        headers=headers,
        insecure=args.insecure,
        user_config=args.config,
    )
    if args.json:
        out(json.dumps([o.as_json() for o in outcomes], indent=2))
    else:
        rows = [
            [
                "ok" if o.as_expected else "FAIL",
                o.case.name[:40],
                o.rule or "-",
                o.result,
                o.case.expect,
                (o.evidence or "-")[:90],
            ]
            for o in outcomes
        ]
        out(table(rows, ["", "CASE", "RULE", "RESULT", "EXPECTED", "EVIDENCE"]))
        for o in outcomes:
            notes = [n.lstrip("!") for n in o.notes]
            out(f"  {o.case.name}: {'; '.join(notes)}")
    good = sum(o.as_expected for o in outcomes)
    restored = sum(o.result == kit.RESTORED for o in outcomes)
    out(f"{good} of {len(outcomes)} cases as expected; {restored} restored")
    return 0 if good == len(outcomes) else 1
