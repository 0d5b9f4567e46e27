"""`hubd webhook create|list|revoke|rotate`: manage webhook tokens, with the daemon running or not.

A token is printed once, by create and rotate, and never stored (only its hash).
"""

from __future__ import annotations

import json
import sys
import time

from hubd.clitable import print_table, utc_text
from hubd.config.model import HubdConfig
from hubd.errors import HubdError
from hubd.store.db import Database
from hubd.untrusted.numbers import ascii_int
from hubd.webhook import store
from hubd.webhook.trigger import Trigger, TriggerInvalid, parse_bytes

_COLUMNS = ("ID", "NAME", "STATE", "CREATED", "CALLS 24H", "LAST CALL", "DEFAULT ACTION")



def _url(config: HubdConfig, token: str) -> str:
    return f"{config.http.local_url}/trigger/with/{token}"


def parse_default_action(text: str | None) -> Trigger | None:
    """The --default-action option, checked like a request body."""
    if text is None:
        return None
    try:
        return parse_bytes(text.encode())
    except TriggerInvalid as err:
        raise HubdError("--default-action: " + "; ".join(f"{p.path}: {p.message}" for p in err.problems)) from None


def check_name(name: str) -> str:
    """The --name option: not empty, and not all digits (it would read as an id in revoke and rotate)."""
    name = name.strip()
    if not name:
        raise HubdError("--name: is empty; give a label such as kitchen-automation")
    if ascii_int(name) is not None:
        raise HubdError(f"--name: {name!r} is all digits and would read as a webhook id in `hubd webhook "
                        "revoke|rotate`; use a name with a letter in it, such as doorbell-1")
    return name


def create(config: HubdConfig, name: str, default_action: str | None) -> int:
    """Make a webhook and print `{"id", "name", "token", "url"}` (plus its default action)."""
    name = check_name(name)
    action = parse_default_action(default_action)
    webhook_id, token = Database.of(config.storage).call_blocking(store.create_blocking, name, action, time.time())
    _print_hook(config, webhook_id, name, token, action.as_body() if action else None)
    return 0


def rotate(config: HubdConfig, ref: str) -> int:
    """Give a webhook a new token (the old one stops working at once) and print it like create."""
    db = Database.of(config.storage)
    hook = _find(db, ref)
    if hook is None:
        return 1
    token = db.call_blocking(store.rotate_blocking, hook.id, time.time())
    if token is None:
        print(f"webhook {hook.id} was revoked meanwhile", file=sys.stderr)
        return 1
    _print_hook(config, hook.id, hook.name, token, hook.default_action)
    return 0


def revoke(config: HubdConfig, ref: str) -> int:
    """Revoke a webhook: its URL answers 404 from now on."""
    db = Database.of(config.storage)
    hook = _find(db, ref)
    if hook is None:
        return 1
    if not db.call_blocking(store.revoke_blocking, hook.id, time.time()):
        print(f"webhook {hook.id} was revoked meanwhile", file=sys.stderr)
        return 1
    print(f"revoked webhook {hook.id} ({hook.name}); its URL now answers 404")
    return 0


def list_hooks(config: HubdConfig, *, as_json: bool) -> int:
    """A table of webhooks (or JSON lines with --json); never a token."""
    now = time.time()
    hooks = Database.of(config.storage).call_blocking(store.list_blocking, now)
    if as_json:
        for h in hooks:
            print(json.dumps({"id": h.id, "name": h.name, "state": _state(h), "createdAt": h.created_at,
                              "rotatedAt": h.rotated_at, "revokedAt": h.revoked_at, "callsLastDay": h.calls_last_day,
                              "lastCallAt": h.last_call_at, "defaultAction": h.default_action}))
        return 0
    if not hooks:
        print("no webhooks; make one with `hubd webhook create --name NAME`")
        return 0
    print_table(_COLUMNS, [(str(h.id), h.name, _state(h), utc_text(h.created_at), str(h.calls_last_day),
                            utc_text(h.last_call_at), json.dumps(h.default_action) if h.default_action else "-")
                           for h in hooks])
    return 0


def _find(db: Database, ref: str) -> store.WebhookInfo | None:
    """The one live webhook `ref` (an id or a name) means, or None after saying why on stderr."""
    found = db.call_blocking(store.find_blocking, ref)
    live = [h for h in found if h.revoked_at is None]
    if len(live) == 1:
        return live[0]
    if len(live) > 1:
        ids = ", ".join(str(h.id) for h in live)
        print(f"{len(live)} live webhooks are named {ref!r} (ids {ids}); give the id instead", file=sys.stderr)
    elif found:
        print(f"webhook {found[0].id} ({found[0].name}) is revoked already; see `hubd webhook list`", file=sys.stderr)
    else:
        print(f"no live webhook {ref!r} (by id or name); see `hubd webhook list`", file=sys.stderr)
    return None


def _print_hook(config: HubdConfig, webhook_id: int, name: str, token: str, action: dict[str, object] | None) -> None:
    out: dict[str, object] = {"id": webhook_id, "name": name, "token": token, "url": _url(config, token)}
    if action is not None:
        out["defaultAction"] = action
    print(json.dumps(out))


def _state(hook: store.WebhookInfo) -> str:
    return "revoked" if hook.revoked_at is not None else "live"

