-- 0004: the local webhook: tokens, their rate-limit counters, and the
-- speaker commands it sent with the results the speakers reported. Tokens are stored as SHA-256 hex.

CREATE TABLE webhook_tokens (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL,
    token_hash     TEXT NOT NULL UNIQUE,
    default_action TEXT,                 -- a trigger body (JSON) run by a call without a body
    created_at     REAL NOT NULL,        -- epoch seconds
    rotated_at     REAL,
    revoked_at     REAL
);

-- One row per admitted call, for the rolling minute and day windows; pruned after a day.
CREATE TABLE webhook_calls (
    token_id INTEGER NOT NULL REFERENCES webhook_tokens (id) ON DELETE CASCADE,
    at       REAL NOT NULL
);
CREATE INDEX webhook_calls_by_token ON webhook_calls (token_id, at);

CREATE TABLE webhook_commands (
    id         TEXT PRIMARY KEY,         -- the command id sent to the speakers
    token_id   INTEGER REFERENCES webhook_tokens (id) ON DELETE SET NULL,
    type       TEXT NOT NULL,            -- tts, audio, asr
    body       TEXT NOT NULL,            -- the trigger body as run (JSON)
    created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX webhook_commands_by_time ON webhook_commands (created_at);

-- Every speaker a command selected: sent, then done/error from its command/result; or offline.
CREATE TABLE webhook_command_targets (
    command_id  TEXT NOT NULL REFERENCES webhook_commands (id) ON DELETE CASCADE,
    endpoint_id TEXT NOT NULL,
    sn          TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('sent', 'done', 'error', 'offline', 'unsent')),
    message     TEXT,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (command_id, endpoint_id)
) WITHOUT ROWID;
