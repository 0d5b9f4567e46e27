-- 0002: the device registry, platform grants (per platform userId) and the durable outbox.
CREATE TABLE devices (
    id      TEXT PRIMARY KEY,             -- endpointId
    config  TEXT NOT NULL,                -- canonical JSON of the device's config
    states  TEXT NOT NULL DEFAULT '{}',   -- {"Interface": [value, timeOfSample]}
    online  INTEGER                       -- NULL: never said
) WITHOUT ROWID;

CREATE TABLE grants (
    user_id          TEXT PRIMARY KEY,    -- the platform's userId from AcceptGrant
    driver_user      TEXT,                -- the hubd account whose user token came with the grant
    access_token     TEXT NOT NULL,
    refresh_token    TEXT,
    expires_at       REAL NOT NULL,       -- epoch seconds
    obtained_at      REAL NOT NULL,
    status           TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'needs_rebind')),
    failure_reported INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT
) WITHOUT ROWID;

-- One row per (event, user). `id` orders delivery; `lanes` lists the endpointIds whose order the
-- row takes part in (a batched AddOrUpdateReport has several). The body has no authorization:
-- the user's current token is added at send time, so a refresh never rewrites the outbox.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         TEXT NOT NULL,
    message_id      TEXT NOT NULL UNIQUE,
    name            TEXT NOT NULL,
    lanes           TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      REAL NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    last_error      TEXT
);
CREATE INDEX outbox_by_user ON outbox (user_id, id);

CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY,      -- the outbox id it had
    user_id     TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    body        TEXT NOT NULL,
    http_status INTEGER,
    response    TEXT,
    attempts    INTEGER NOT NULL,
    created_at  REAL NOT NULL,
    dead_at     REAL NOT NULL
);
