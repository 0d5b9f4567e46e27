"""The `outbox` and `dead_letters` tables: every SQL statement on them.

An outbox row is one platform message for one user: its name, its lanes (the endpoints whose order it joins, JSON;
a first lane starting with `hubd.events.BARRIER_LANE` makes it a barrier), its body (JSON text with its own
messageId and no token), its attempts and next attempt time, and the time it was written. Rows are inserted by the
outbox writer (`insert_events_blocking`, inside the writer's transaction, so they are durable with the device rows
or the grant that caused them) and read, deleted, dead-lettered and split by the sender (`OutboxRepo`). Ids grow:
a row's id is its place in the outbox. A row leaves the outbox only by being delivered, moved to `dead_letters`
(in one transaction), replaced by its pieces (in one transaction), merged into an older discovery report before
either was sent (in one transaction), or dropped with its user. Writes raise `StorageUnavailable` when the disk
refuses them; `writable()` says when to try again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from hubd.events import BARRIER_LANE, PendingEvent, new_message_id
from hubd.store.db import Database

# Row ids per `IN (?, ...)` query: well below SQLite's variable limit (999 before 3.32).
QUERY_CHUNK = 500

Loaded = tuple[str, str, str, float]  # a row's name, body (JSON text), messageId and time written
# A row as the sender indexes it: id, user, lanes (JSON), attempts, next attempt, name, messageId, time written.
IndexedRow = tuple[int, str, str, int, float, str, str, float]


class Written(NamedTuple):
    """A row as `insert_events_blocking` wrote it: what the sender needs to send it without reading it back."""

    id: int
    user_id: str
    name: str
    lanes: str  # JSON
    body: str  # JSON text, with its messageId, without a token
    message_id: str
    created_at: float


class OutboxRepo:
    """The sender's reads and writes of the outbox (the writer inserts inside its own transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def writable(self) -> None:
        """Return once the database takes writes again (at once if it does)."""
        await self._db.writable()

    async def new_rows(self, after: int) -> list[IndexedRow]:
        """Rows after id `after`, in id order."""
        return await self._db.call(new_rows_blocking, after)

    async def bodies(self, ids: list[int]) -> dict[int, Loaded]:
        """Name, body, messageId and time written of each of these rows still in the outbox."""
        return await self._db.call(bodies_blocking, ids)

    async def delete(self, ids: Iterable[int]) -> None:
        """Delete rows (delivered, or dropped), in one transaction."""
        await self._db.call(delete_blocking, ids)

    async def note_retry(self, row_id: int, attempts: int, next_at: float, error: str) -> None:
        """Remember a row's failed attempts, next attempt time and last error (for a restart)."""
        await self._db.call(note_retry_blocking, row_id, attempts, next_at, error)

    async def dead_letter(self, row_id: int, status: int, response: str, now: float) -> None:
        """Move a row the platform refused for good to `dead_letters`, with the answer, in one transaction."""
        await self._db.call(dead_letter_blocking, row_id, status, response, now)

    async def merge(self, row_id: int, others: Sequence[int], delivered: Sequence[int] = ()
                    ) -> tuple[Loaded, list[int]] | None:
        """Make `others` (discovery reports of `row_id`'s name) part of row `row_id`, in one transaction that also
        deletes the `delivered` rows: the row as it now is, and which of `others` it took (the rest are gone).
        None: row `row_id` is gone."""
        return await self._db.call(merge_blocking, row_id, list(others), list(delivered))

    async def split(self, row_id: int) -> int:
        """Replace a batched discovery row by one barrier row per endpoint; how many (0: the row is gone)."""
        return await self._db.call(split_blocking, row_id)


def insert_events_blocking(conn: sqlite3.Connection, events: Sequence[PendingEvent],
                           user_ids: Sequence[str] | None, now: float) -> list[Written]:
    """Insert one outbox row per (event, user), each with a new messageId; users default to everyone with a
    grant. Inside the caller's transaction; returns the rows written, in id order.

    Their ids are read back, not guessed from a query: `id` is AUTOINCREMENT and this connection is the only
    writer, so the rows of one INSERT statement get consecutive ids ending at `last_insert_rowid()`.
    """
    if not events:
        return []
    users = list(user_ids) if user_ids is not None else [
        r[0] for r in conn.execute("SELECT user_id FROM grants ORDER BY user_id")]
    rows = []
    for event in events:
        lanes = json.dumps(list(event.lanes))
        for user in users:
            message_id = new_message_id()
            body = {**event.body, "header": {**event.body["header"], "messageId": message_id}}
            rows.append((user, message_id, event.name, lanes, json.dumps(body, separators=(",", ":")), now))
    if not rows:
        return []
    conn.executemany(
        "INSERT INTO outbox (user_id, message_id, name, lanes, body, created_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
    last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
    first = last - len(rows) + 1
    return [Written(first + i, user, name, lanes, body, message_id, created)
            for i, (user, message_id, name, lanes, body, created) in enumerate(rows)]


def count_by_name(rows: Iterable[Written]) -> dict[str, int]:
    """How many rows of each name."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.name] = counts.get(row.name, 0) + 1
    return counts


def new_rows_blocking(conn: sqlite3.Connection, after: int) -> list[IndexedRow]:
    """Rows after `after`, in id order: id, user, lanes, attempts, next attempt, name, messageId, time written."""
    return [tuple(r) for r in conn.execute(
        "SELECT id, user_id, lanes, attempts, next_attempt_at, name, message_id, created_at FROM outbox WHERE id > ? "
        "ORDER BY id", (after,))]


def bodies_blocking(conn: sqlite3.Connection, ids: list[int]) -> dict[int, Loaded]:
    """Name, body (JSON text), messageId and time written of each row still in the outbox."""
    out: dict[int, Loaded] = {}
    for start in range(0, len(ids), QUERY_CHUNK):
        chunk = ids[start:start + QUERY_CHUNK]
        marks = ",".join("?" * len(chunk))
        query = f"SELECT id, name, body, message_id, created_at FROM outbox WHERE id IN ({marks})"  # noqa: S608 - ?s
        rows = conn.execute(query, chunk)
        out.update((row[0], (row[1], row[2], row[3], row[4])) for row in rows)
    return out


def delete_blocking(conn: sqlite3.Connection, ids: Iterable[int]) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        delete_rows_blocking(conn, ids)


def delete_rows_blocking(conn: sqlite3.Connection, ids: Iterable[int]) -> None:
    """Delete rows inside the caller's transaction (a delivered row deleted with the writer's next commit)."""
    rows = [(i,) for i in ids]
    if rows:  # most commits have none to delete: no statement for them
        conn.executemany("DELETE FROM outbox WHERE id = ?", rows)


def note_retry_blocking(conn: sqlite3.Connection, row_id: int, attempts: int, next_at: float, error: str) -> None:
    conn.execute("UPDATE outbox SET attempts=?, next_attempt_at=?, last_error=? WHERE id=?",
                 (attempts, next_at, error, row_id))


def dead_letter_blocking(conn: sqlite3.Connection, row_id: int, status: int, response: str, now: float) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO dead_letters (id, user_id, message_id, name, body, http_status, response, attempts, "
            "created_at, dead_at) SELECT id, user_id, message_id, name, body, ?, ?, attempts + 1, created_at, ? "
            "FROM outbox WHERE id = ?", (status, response, now, row_id))
        conn.execute("DELETE FROM outbox WHERE id = ?", (row_id,))


def merge_blocking(conn: sqlite3.Connection, row_id: int, others: list[int], delivered: Sequence[int] = ()
                   ) -> tuple[Loaded, list[int]] | None:
    """Append the endpoints and lanes of rows `others` to row `row_id`'s, in that order, and delete them; an
    endpoint already there takes the later row's description (a device described again within the window).

    The row keeps its id (its place in each lane it joins: the others headed theirs) and its messageId, which
    the caller has never sent. The `delivered` rows (not deleted yet) go in the same transaction: one of them may
    stand between the row and a newer one it takes in a lane, and read back after a crash it would go again after
    the newer row's endpoints, out of their order.
    """
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        delete_rows_blocking(conn, delivered)
        ids = [row_id, *others]
        marks = ",".join("?" * len(ids))
        found = {r[0]: tuple(r[1:]) for r in conn.execute(
            f"SELECT id, name, lanes, body, message_id, created_at FROM outbox WHERE id IN ({marks})",  # noqa: S608
            ids)}
        if row_id not in found:
            return None
        name, lanes_json, text, message_id, created_at = found[row_id]
        taken = [i for i in others if i in found]
        if not taken:
            return (name, text, message_id, created_at), []
        body = json.loads(text)
        lanes = json.loads(lanes_json)
        endpoints = body["payload"]["endpoints"]
        place = {e["endpointId"]: i for i, e in enumerate(endpoints)}
        for other in taken:
            for endpoint in json.loads(found[other][2])["payload"]["endpoints"]:
                key = endpoint["endpointId"]
                if key in place:  # described again within the window: the newer description, in the older's place
                    endpoints[place[key]] = endpoint
                else:
                    place[key] = len(endpoints)
                    endpoints.append(endpoint)
            lanes.extend(lane for lane in json.loads(found[other][1]) if lane not in lanes)
        text = json.dumps(body, separators=(",", ":"))
        conn.execute("UPDATE outbox SET body = ?, lanes = ? WHERE id = ?", (text, json.dumps(lanes), row_id))
        conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in taken])
        return (name, text, message_id, created_at), taken


def split_blocking(conn: sqlite3.Connection, row_id: int) -> int:
    """Replace a batched discovery row by one barrier row per endpoint (new messageIds); how many.

    The pieces' barrier lane names the row (`#<row_id>`), so they take its place among the user's barriers,
    also after a restart: before a later grant's AddOrUpdateReport, which is newer than they are.
    """
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        found = conn.execute("SELECT user_id, name, body, created_at FROM outbox WHERE id = ?", (row_id,)).fetchone()
        if found is None:
            return 0
        user_id, name, text, created_at = tuple(found)
        body = json.loads(text)
        rows = []
        for endpoint in body["payload"]["endpoints"]:
            message_id = new_message_id()
            piece = {**body, "header": {**body["header"], "messageId": message_id},
                     "payload": {**body["payload"], "endpoints": [endpoint]}}
            rows.append((user_id, message_id, name, json.dumps([f"{BARRIER_LANE}{row_id}", endpoint["endpointId"]]),
                         json.dumps(piece, separators=(",", ":")), created_at))
        conn.execute("DELETE FROM outbox WHERE id = ?", (row_id,))
        conn.executemany(
            "INSERT INTO outbox (user_id, message_id, name, lanes, body, created_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
        return len(rows)
