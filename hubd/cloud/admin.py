"""`hubd grants list` and `hubd grants remove USER`: the platform users hubd reports to, without secrets.

Works with the daemon running or not (SQLite WAL; one short transaction). A running daemon stops sending
to a removed user at that user's next token refresh at the latest (it forgets the user then).
"""

from __future__ import annotations

import sys

from hubd.clitable import print_table, utc_text
from hubd.config.model import HubdConfig
from hubd.store.db import Database
from hubd.store.grants import GrantSummary, list_grants_blocking, remove_grant_blocking

_COLUMNS = ("USER", "STATE", "LINKED BY", "TOKEN OBTAINED", "TOKEN EXPIRES", "PENDING EVENTS", "NOTE")


def list_grants(config: HubdConfig) -> int:
    """Print one row per platform user with a grant; exit code 0."""
    grants = Database.of(config.storage).call_blocking(list_grants_blocking)
    if not grants:
        print("no platform user has bound this hub")
        return 0
    print_table(_COLUMNS, [_row(g) for g in grants])
    return 0


def remove_grant(config: HubdConfig, user_id: str) -> int:
    """Forget a platform user's grant and undelivered events; 0 if there was one, 1 if not."""
    existed, dropped = Database.of(config.storage).call_blocking(remove_grant_blocking, user_id)
    if not existed:
        print(f"no grant for platform user {user_id!r} (see `hubd grants list`)", file=sys.stderr)
        return 1
    print(f"removed the grant of {user_id!r} and {dropped} undelivered event{'s' if dropped != 1 else ''}; "
          "hubd reports to them again only after they bind again in the platform's app")
    return 0



def _row(grant: GrantSummary) -> tuple[str, ...]:
    state = "active" if grant.status == "active" else (
        "must bind again" + (" (failure reported)" if grant.failure_reported else ""))
    return (grant.user_id, state, grant.driver_user or "-", utc_text(grant.obtained_at), utc_text(grant.expires_at),
            str(grant.pending_events), grant.last_error or "")
