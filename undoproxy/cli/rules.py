"""Rules without a running undoproxy: `undoproxy rules check`, `rules explain` and `packs`."""

from __future__ import annotations

import argparse
from pathlib import Path

from undoproxy.cli.options import config_path
from undoproxy.cli.output import out
from undoproxy.errors import UndoproxyError

# undoproxy.config (rules, packs) is imported inside the commands that read a config: it was
# most of the start-up time of every other command (0.7 of 0.8 s).


def cmd_rules_check(args: argparse.Namespace) -> int:
    """Validate a config and its rule packs; every mistake is listed with file:line."""
    path = config_path(args)
    from undoproxy.config import load_config
    from undoproxy.packs import PACKS_DIR

    config = load_config(path)
    packs = [r for r in config.rules if Path(r.where.file).parent == PACKS_DIR]
    n = len(config.rules.rules) - len(packs)
    text = f"{path or 'built-in defaults'}: OK, {n} rule{'s' if n != 1 else ''}"
    if packs:
        names = ", ".join(dict.fromkeys(r.name.split("/", 1)[0] for r in packs))
        text += f", and {len(packs)} from the packs {names}"
    out(text)
    return 0


def cmd_rules_explain(args: argparse.Namespace) -> int:
    """Show which rule a request would match, its captures, and why earlier rules did not."""
    from undoproxy.compensators.plan import plan_for
    from undoproxy.config import load_config
    from undoproxy.credentials import signature_scheme
    from undoproxy.rules import RequestView, format_explanation

    config = load_config(config_path(args))
    headers = []
    for item in args.header or []:
        name, sep, value = item.partition(":")
        if not sep:
            raise UndoproxyError(f"--header must be 'Name: value', got {item!r}")
        headers.append((name.strip(), value.strip()))
    if args.body is not None and not any(k.lower() == "content-type" for k, _ in headers):
        headers.append(("Content-Type", "application/json"))
    url = args.url if "://" in args.url else "https://" + args.url
    view = RequestView.from_parts(args.method, url, headers, (args.body or "").encode())
    verdicts = config.rules.explain(view)
    irreversible = None
    if config.defaults_mutations == "hold-irreversible":
        signed = signature_scheme(headers)
        if config.signing.for_url(url) is not None:
            signed = None  # undoproxy signs its own requests to this host (signing:)
        plan = plan_for(view, None, {}, auto=config.defaults_compensate == "auto")
        irreversible = f"the request is signed ({signed})" if signed else plan.reason
    out(
        format_explanation(
            view,
            verdicts,
            default_mutations=config.defaults_mutations,
            default_compensate=config.defaults_compensate,
            hold_at=config.hold_at,
            irreversible=irreversible,
        )
    )
    return 0


def cmd_packs(args: argparse.Namespace) -> int:
    """List the built-in API packs, or (with NAME) one pack's rules."""
    from undoproxy.packs.listing import describe_pack, list_packs

    out(describe_pack(args.name) if args.name else list_packs())
    return 0
