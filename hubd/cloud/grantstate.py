"""GrantState: the token manager's grants in memory and the refresh schedule, pure.

Owns when a token is refreshed (`refresh_at`: at 80% of its lifetime, 5 minutes before expiry or after 12 h,
whichever is first) and how close to expiry it stops being used (`send_margin`), and what the manager knows
of each user beyond the row: a token the event API refused (refreshed before anything else), the retry time
and backoff after a failed refresh, grants newer in memory than their rows (the disk refused the write), and
the activation counts the outbox sender orders its loads by. Every change of a grant goes through here, so a
refresh, a new grant and an end each clear what no longer holds (staleness, retries) in one place.
No I/O, no logging, no locks, no clock: times come in as arguments, and hubd.cloud.tokens does the rest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hubd.lifecycle import Backoff
from hubd.store.grants import Grant

REFRESH_FRACTION = 0.8
REFRESH_MARGIN_S = 300.0
MAX_REFRESH_INTERVAL_S = 12 * 3600.0
MIN_REFRESH_INTERVAL_S = 1.0
RESCHEDULE_CHECK_S = 30.0  # re-check at least this often, so a clock jump or a suspend is noticed


def refresh_at(grant: Grant) -> float:
    """When to refresh: at 80% of the lifetime, 5 min before expiry or after 12 h, whichever is first.

    The 5-minute margin only applies to tokens living 10 minutes or more, so a very short-lived token
    is still refreshed at 80% of its life instead of in a tight loop; never sooner than 1 s.
    """
    lifetime = max(grant.expires_at - grant.obtained_at, 0.0)
    wait = REFRESH_FRACTION * lifetime
    if lifetime - REFRESH_MARGIN_S >= 0.5 * lifetime:
        wait = min(wait, lifetime - REFRESH_MARGIN_S)
    wait = max(min(wait, MAX_REFRESH_INTERVAL_S), MIN_REFRESH_INTERVAL_S)
    return grant.obtained_at + wait


def send_margin(grant: Grant) -> float:
    """A token this close to expiry is not used for sending; it is refreshed first."""
    lifetime = max(grant.expires_at - grant.obtained_at, 0.0)
    return min(30.0, 0.15 * lifetime)


class GrantState:
    """Every grant the manager holds, by user, with each user's refresh bookkeeping."""

    def __init__(self) -> None:
        self._grants: dict[str, Grant] = {}
        self._stale: set[str] = set()  # users whose current token the event API refused: refresh first
        self._retry_at: dict[str, float] = {}
        self._backoffs: defaultdict[str, Backoff] = defaultdict(lambda: Backoff(initial_s=2.0, cap_s=60.0))
        self._activations = 0
        self._activated: dict[str, int] = {}
        self.unsaved: set[str] = set()  # users whose grant in memory is newer than its row (the disk refused)

    def load(self, grants: Iterable[Grant]) -> None:
        """Hold these grants (the table, at start) instead of any held before."""
        self._grants = {g.user_id: g for g in grants}

    def get(self, user_id: str) -> Grant | None:
        """The user's grant, or None."""
        return self._grants.get(user_id)

    def all(self) -> list[Grant]:
        """Every grant."""
        return list(self._grants.values())

    def active_count(self) -> int:
        """How many grants are active."""
        return sum(g.active for g in self._grants.values())

    def activations(self) -> int:
        """How many times a grant became active (any user) since start."""
        return self._activations

    def activated(self, user_id: str) -> int:
        """`activations()` as it was when this user's grant last became active; 0: not since start."""
        return self._activated.get(user_id, 0)

    def usable_token(self, user_id: str, now: float) -> tuple[str | None, bool]:
        """The user's access token if events may be sent with it at `now`, else None; and whether the
        token is withheld only for being within `send_margin` of expiry (its refresh is due)."""
        grant = self._grants.get(user_id)
        if grant is None or not grant.active or user_id in self._stale:
            return None, False
        if grant.expires_at - now <= send_margin(grant):
            return None, True
        return grant.access_token, False

    def invalidate(self, user_id: str, token: str) -> bool:
        """The event API refused `token`: True (the user is stale now) if it is the active grant's token."""
        grant = self._grants.get(user_id)
        if grant is None or not grant.active or grant.access_token != token:
            return False
        self._stale.add(user_id)
        return True

    def activate(self, grant: Grant) -> None:
        """A new grant, stored: it replaces the user's, whose row it wrote whole; counted as an activation."""
        user_id = grant.user_id
        self._grants[user_id] = grant
        self.unsaved.discard(user_id)
        self._stale.discard(user_id)
        # The sender reads `activations()` before each load of new rows: once it has loaded after this,
        # it has the rows the grant's commit wrote (the new grant's AddOrUpdateReport, which must go first).
        self._activations += 1
        self._activated[user_id] = self._activations
        self._retry_at.pop(user_id, None)
        self._backoffs.pop(user_id, None)

    def refreshed(self, grant: Grant, access_token: str, refresh_token: str | None, expires_at: float,
                  now: float) -> None:
        """`grant`'s tokens were refreshed at `now` (a refresh token not given again stays the old one)."""
        user_id = grant.user_id
        self._grants[user_id] = Grant(user_id, grant.driver_user, access_token, refresh_token or grant.refresh_token,
                                      expires_at, now, "active", False, None)
        self._stale.discard(user_id)
        self._retry_at.pop(user_id, None)
        self._backoffs.pop(user_id, None)

    def ended(self, grant: Grant, reason: str) -> None:
        """`grant` has ended: the user must bind again."""
        self._stale.discard(grant.user_id)
        self._grants[grant.user_id] = Grant(grant.user_id, grant.driver_user, grant.access_token,
                                            grant.refresh_token, grant.expires_at, grant.obtained_at,
                                            "needs_rebind", grant.failure_reported, reason[:500])

    def failure_reported(self, user_id: str) -> bool:
        """The failure report of the user's ended grant is done: True if an ended grant noted it."""
        current = self._grants.get(user_id)
        if current is None or current.active:
            return False
        self._grants[user_id] = Grant(current.user_id, current.driver_user, current.access_token,
                                      current.refresh_token, current.expires_at, current.obtained_at,
                                      current.status, True, current.last_error)
        return True

    def forget(self, user_id: str) -> None:
        """The grant's row is gone (`hubd grants remove` while hubd ran): no more events for the user."""
        del self._grants[user_id]
        self._stale.discard(user_id)

    def due(self, now: float, refreshing: set[str]) -> tuple[list[str], float]:
        """The active users whose refresh is due at `now` (not those in `refreshing`), and when the next one
        is due (at most RESCHEDULE_CHECK_S away). A stale token is due at once; a retry never before its time."""
        users: list[str] = []
        next_due = now + RESCHEDULE_CHECK_S
        for grant in list(self._grants.values()):
            if not grant.active or grant.user_id in refreshing:
                continue
            due = now if grant.user_id in self._stale else refresh_at(grant)
            due = max(due, self._retry_at.get(grant.user_id, 0.0))
            if due <= now:
                users.append(grant.user_id)
            else:
                next_due = min(next_due, due)
        return users, next_due

    def retry_later(self, user_id: str, now: float) -> float:
        """A refresh failed for now: the next try waits the user's next backoff delay, which is returned."""
        delay = self._backoffs[user_id].next_delay()
        self._retry_at[user_id] = now + delay
        return delay
