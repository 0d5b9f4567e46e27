"""InstanceIdentity: the installation's secret (`meta.instance_secret`, made by migration 0009) and the
`/healthz` challenge answers made with it (hubd/identity.py). Read once, then kept in memory; never logged.
"""

from __future__ import annotations

import sqlite3

from hubd.identity import SECRET_KEY, prove
from hubd.store.db import Database


def read_instance_secret_blocking(conn: sqlite3.Connection) -> bytes | None:
    """The installation's secret, or None in a database older than migration 0009 (or one without the row)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (SECRET_KEY,)).fetchone()
    except sqlite3.OperationalError:  # no meta table: not a hubd database
        return None
    if row is None:
        return None
    try:
        return bytes.fromhex(str(row[0]))
    except ValueError:
        return None


class InstanceIdentity:
    """Answers `/healthz` challenges with this installation's secret (the HTTP server's `IdentityProof`)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._secret: bytes | None = None

    async def prove(self, challenge: str) -> str | None:
        """The answer to a (valid) challenge; None if the database holds no secret."""
        if self._secret is None:
            self._secret = await self._db.call(read_instance_secret_blocking)
        return None if self._secret is None else prove(self._secret, challenge)
