"""GrantRepo: the platform grants, one row per platform userId (table `grants`).

Also the blocking functions `hubd grants list|remove` use (works with the daemon running or not).
Writes raise `StorageUnavailable` when the disk refuses them; `writable()` says when to try again.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from hubd.store.db import Database


@dataclass(frozen=True, slots=True)
class Grant:
    """A bound user's platform tokens."""

    user_id: str
    driver_user: str | None
    access_token: str
    refresh_token: str | None
    expires_at: float
    obtained_at: float
    status: str  # 'active' | 'needs_rebind'
    failure_reported: bool
    last_error: str | None

    def __repr__(self) -> str:  # never show tokens
        return f"Grant(user_id={self.user_id!r}, status={self.status!r}, expires_at={self.expires_at})"

    @property
    def active(self) -> bool:
        """True while the grant can be used."""
        return self.status == "active"


_COLUMNS = ("user_id, driver_user, access_token, refresh_token, expires_at, obtained_at, status, "
            "failure_reported, last_error")


def _grant(row: sqlite3.Row | tuple[object, ...]) -> Grant:
    r = tuple(row)
    return Grant(str(r[0]), r[1] if r[1] is None else str(r[1]), str(r[2]), r[3] if r[3] is None else str(r[3]),
                 float(r[4]), float(r[5]), str(r[6]), bool(r[7]), r[8] if r[8] is None else str(r[8]))


class GrantRepo:
    """Reads and writes grants."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def all(self) -> list[Grant]:
        """Every grant."""
        return await self._db.call(lambda c: [_grant(r) for r in c.execute(
            f"SELECT {_COLUMNS} FROM grants ORDER BY user_id")])  # noqa: S608 - constant column list

    async def get(self, user_id: str) -> Grant | None:
        """One grant."""
        def q(c: sqlite3.Connection) -> Grant | None:
            row = c.execute(f"SELECT {_COLUMNS} FROM grants WHERE user_id = ?", (user_id,)).fetchone()  # noqa: S608
            return _grant(row) if row else None
        return await self._db.call(q)

    async def replace(self, grant: Grant) -> None:
        """Insert or replace a user's grant (a new AcceptGrant replaces the old)."""
        await self._db.call(replace_grant_blocking, grant)

    async def writable(self) -> None:
        """Return once the database takes writes again (at once if it does)."""
        await self._db.writable()

    async def store(self, grant: Grant) -> bool:
        """Write every column of an existing grant (what memory holds); False if the grant was removed meanwhile."""
        g = grant
        cursor = await self._db.call(lambda c: c.execute(
            "UPDATE grants SET driver_user=?, access_token=?, refresh_token=?, expires_at=?, obtained_at=?, status=?, "
            "failure_reported=?, last_error=? WHERE user_id=?",
            (g.driver_user, g.access_token, g.refresh_token, g.expires_at, g.obtained_at, g.status,
             int(g.failure_reported), g.last_error, g.user_id)))
        return bool(cursor.rowcount)

    async def update_tokens(self, user_id: str, access: str, refresh: str | None, expires_at: float,
                            obtained_at: float) -> bool:
        """Store refreshed tokens (before they are used); False if the grant was removed meanwhile."""
        cursor = await self._db.call(lambda c: c.execute(
            "UPDATE grants SET access_token=?, refresh_token=COALESCE(?, refresh_token), expires_at=?, "
            "obtained_at=?, last_error=NULL WHERE user_id=?", (access, refresh, expires_at, obtained_at, user_id)))
        return bool(cursor.rowcount)

    async def mark_needs_rebind(self, user_id: str, reason: str) -> None:
        """The grant is dead; keep the user's events until a new grant arrives."""
        await self._db.call(lambda c: c.execute(
            "UPDATE grants SET status='needs_rebind', last_error=? WHERE user_id=?", (reason[:500], user_id)))

    async def mark_failure_reported(self, user_id: str) -> None:
        """The failure report went out; do not send it again for this grant (a new grant is left alone)."""
        await self._db.call(lambda c: c.execute(
            "UPDATE grants SET failure_reported=1 WHERE user_id=? AND status='needs_rebind'", (user_id,)))

    async def note_error(self, user_id: str, error: str) -> None:
        """Remember the last transient error (shown on the status page)."""
        await self._db.call(lambda c: c.execute(
            "UPDATE grants SET last_error=? WHERE user_id=?", (error[:500], user_id)))


@dataclass(frozen=True, slots=True)
class GrantSummary:
    """One grant as `hubd grants list` shows it (never a token)."""

    user_id: str
    driver_user: str | None
    status: str
    expires_at: float
    obtained_at: float
    failure_reported: bool
    last_error: str | None
    pending_events: int


def list_grants_blocking(c: sqlite3.Connection) -> list[GrantSummary]:
    """Every grant with its number of undelivered events."""
    rows = c.execute(
        "SELECT g.user_id, g.driver_user, g.status, g.expires_at, g.obtained_at, g.failure_reported, g.last_error, "
        "(SELECT COUNT(*) FROM outbox o WHERE o.user_id = g.user_id) FROM grants g ORDER BY g.user_id")
    return [GrantSummary(str(r[0]), r[1], str(r[2]), float(r[3]), float(r[4]), bool(r[5]), r[6], int(r[7]))
            for r in rows]


def remove_grant_blocking(c: sqlite3.Connection, user_id: str) -> tuple[bool, int]:
    """Delete a user's grant and undelivered events in one transaction: (whether it existed, events dropped)."""
    with c:
        c.execute("BEGIN IMMEDIATE")
        existed = c.execute("DELETE FROM grants WHERE user_id = ?", (user_id,)).rowcount > 0
        dropped = c.execute("DELETE FROM outbox WHERE user_id = ?", (user_id,)).rowcount
    return existed, dropped


def replace_grant_blocking(c: sqlite3.Connection, g: Grant) -> None:
    """Insert or replace a user's grant (inside the caller's transaction, if any)."""
    c.execute(
        f"INSERT OR REPLACE INTO grants ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        (g.user_id, g.driver_user, g.access_token, g.refresh_token, g.expires_at, g.obtained_at, g.status,
         int(g.failure_reported), g.last_error),
    )
