"""`hubd admin-token create|list|revoke`: the owner's tokens for the devices API, with the daemon running or not.

A token is printed once, by create, and never stored (only its hash: `hubd.store.admin_tokens`).
"""

from __future__ import annotations

import json
import sys
import time

from hubd.clitable import print_table, utc_text
from hubd.config.model import HubdConfig
from hubd.errors import HubdError
from hubd.store import admin_tokens
from hubd.store.db import Database
from hubd.untrusted.numbers import ascii_int

_COLUMNS = ("ID", "NAME", "STATE", "CREATED", "REVOKED")
MAX_NAME_CHARS = 100


def check_name(name: str) -> str:
    """The --name option: not empty, not too long."""
    name = name.strip()
    if not name:
        raise HubdError("--name: is empty; give a label such as phone or home-assistant")
    if len(name) > MAX_NAME_CHARS:
        raise HubdError(f"--name: {len(name)} characters; at most {MAX_NAME_CHARS}")
    return name


def create(config: HubdConfig, name: str) -> int:
    """Make a token and print `{"id", "name", "token"}` (the only time the token is shown)."""
    name = check_name(name)
    token_id, token = Database.of(config.storage).call_blocking(admin_tokens.create_blocking, name, time.time())
    print(json.dumps({"id": token_id, "name": name, "token": token}))
    return 0


def list_tokens(config: HubdConfig, *, as_json: bool) -> int:
    """A table of admin tokens (or JSON lines with --json); never a token."""
    tokens = Database.of(config.storage).call_blocking(admin_tokens.list_blocking)
    if as_json:
        for t in tokens:
            print(json.dumps({"id": t.id, "name": t.name, "state": _state(t), "createdAt": t.created_at,
                              "revokedAt": t.revoked_at}))
        return 0
    if not tokens:
        print("no admin tokens; make one with `hubd admin-token create --name NAME`")
        return 0
    print_table(_COLUMNS, [(str(t.id), t.name, _state(t), utc_text(t.created_at), utc_text(t.revoked_at))
                           for t in tokens])
    return 0


def revoke(config: HubdConfig, ref: str) -> int:
    """Revoke a token: requests that carry it get 401 from now on."""
    number = ascii_int(ref)
    if number is None:
        print(f"{ref!r} is not a token id; see `hubd admin-token list`", file=sys.stderr)
        return 1
    db = Database.of(config.storage)
    known = {t.id: t for t in db.call_blocking(admin_tokens.list_blocking)}
    token = known.get(number)
    if token is None:
        print(f"no admin token {ref}; see `hubd admin-token list`", file=sys.stderr)
        return 1
    if not db.call_blocking(admin_tokens.revoke_blocking, token.id, time.time()):
        print(f"admin token {token.id} ({token.name}) is revoked already", file=sys.stderr)
        return 1
    print(f"revoked admin token {token.id} ({token.name}); requests with it now get 401")
    return 0


def _state(token: admin_tokens.AdminToken) -> str:
    return "revoked" if token.revoked_at is not None else "live"
