-- 0003: hubd as the brand driver: login grants, authorization codes, issued token pairs.
-- No secret is stored in plain text: codes and tokens are kept as SHA-256 hex of their text.

-- One successful login of a hubd account: the family of token pairs that descend from it.
CREATE TABLE driver_grants (
    id          INTEGER PRIMARY KEY,
    username    TEXT NOT NULL,            -- the driver.accounts username (= UserAuth.userId)
    created_at  REAL NOT NULL,            -- epoch seconds
    revoked_at  REAL,
    revoked_why TEXT
);
CREATE INDEX driver_grants_by_user ON driver_grants (username);

-- OAuth 2.0 mode: single-use codes, bound to the callbackURL they were issued for.
CREATE TABLE driver_codes (
    code_hash    TEXT PRIMARY KEY,
    username     TEXT NOT NULL,
    callback_url TEXT NOT NULL,
    created_at   REAL NOT NULL,
    expires_at   REAL NOT NULL,
    used_at      REAL,
    grant_id     INTEGER REFERENCES driver_grants (id) ON DELETE SET NULL  -- set when exchanged
) WITHOUT ROWID;

-- One issued (userToken, refreshToken) pair. A refresh rotates the pair: the old row keeps
-- rotated_at, the id of its successor, and the successor pair sealed under a key only the old
-- refresh token yields, so a retried refresh within the grace period gets the same new pair.
CREATE TABLE driver_tokens (
    id                 INTEGER PRIMARY KEY,
    grant_id           INTEGER NOT NULL REFERENCES driver_grants (id) ON DELETE CASCADE,
    user_hash          TEXT NOT NULL UNIQUE,
    refresh_hash       TEXT NOT NULL UNIQUE,
    created_at         REAL NOT NULL,
    user_expires_at    REAL NOT NULL,
    refresh_expires_at REAL NOT NULL,
    rotated_at         REAL,
    successor_id       INTEGER,
    sealed_successor   BLOB
);
CREATE INDEX driver_tokens_by_grant ON driver_tokens (grant_id);
