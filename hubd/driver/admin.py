"""`hubd tokens list` and `hubd tokens revoke USER`: the grants hubd's driver issued, without secrets.

Works with the daemon running or not (SQLite WAL; one short transaction).
"""

from __future__ import annotations

import sys
import time

from hubd.clitable import print_table, utc_text
from hubd.config.model import HubdConfig
from hubd.driver.store import GrantInfo, list_grants_blocking, revoke_user_blocking
from hubd.store.db import Database

_COLUMNS = ("GRANT", "USER", "STATE", "LINKED", "REFRESHED", "TOKEN EXPIRES", "REFRESH EXPIRES", "NOTE")


def list_tokens(config: HubdConfig) -> int:
    """Print one row per grant (a linked login and its current token pair); exit code 0."""
    grants = Database.of(config.storage).call_blocking(list_grants_blocking)
    if not grants:
        print("no tokens issued")
        return 0
    now = time.time()
    print_table(_COLUMNS, [_row(g, now) for g in grants])
    return 0


def revoke_tokens(config: HubdConfig, user: str) -> int:
    """Revoke every live grant of `user`; 0 if there was one, 1 if the user had none."""
    count = Database.of(config.storage).call_blocking(revoke_user_blocking, user, time.time(),
                                                      "revoked with `hubd tokens revoke`")
    if count == 0:
        print(f"no live tokens for {user!r}", file=sys.stderr)
        return 1
    print(f"revoked {count} grant{'s' if count != 1 else ''} of {user!r}; "
          "the platform must link the account again (remove it from driver.accounts to stop new logins)")
    return 0



def _row(grant: GrantInfo, now: float) -> tuple[str, ...]:
    note = grant.revoked_why or ""
    return (str(grant.grant_id), grant.username, grant.state(now), utc_text(grant.created_at),
            utc_text(grant.refreshed_at), utc_text(grant.user_expires_at), utc_text(grant.refresh_expires_at), note)

