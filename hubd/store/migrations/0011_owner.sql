-- 0011: the owner's control (the devices page and its API).
-- device_overrides: the name, room, exposure and doorbell event the owner set for an endpointId, kept whether or not
-- the device is there (an override of a device that is gone applies when it comes back). A row whose values are all
-- unset is kept too: its updated_at is when the owner last changed something (the backup's newer-database rule).
CREATE TABLE device_overrides (
    endpoint_id TEXT PRIMARY KEY,
    name TEXT,
    room TEXT,
    hidden INTEGER NOT NULL DEFAULT 0,
    doorbell TEXT,
    updated_at REAL NOT NULL
) WITHOUT ROWID;

-- admin_tokens: `hubd admin-token create` makes them; only the SHA-256 hex of a token is kept.
CREATE TABLE admin_tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    revoked_at REAL
);
