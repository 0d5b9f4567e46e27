-- 0006: the first reply to every control directive that reached a device, by (hubd account, messageId,
-- fingerprint of what it asked), so a directive resent after a restart is answered again and never
-- executed twice. The row is written before the `set` goes out, holding the target
-- states (the optimistic reply); `done` turns 1 once the reply that went out replaces it. Pruned
-- after 10 minutes.
CREATE TABLE directive_replies (
    user_id     TEXT NOT NULL,            -- the hubd account of the header token ('' if none)
    message_id  TEXT NOT NULL,
    fingerprint TEXT NOT NULL,            -- SHA-256 hex of namespace, name, endpointId and payload
    attempt     TEXT NOT NULL,            -- which try wrote the row (a try that never published removes it)
    reply       TEXT NOT NULL,            -- the reply JSON
    done        INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,            -- epoch seconds
    PRIMARY KEY (user_id, message_id, fingerprint)
) WITHOUT ROWID;
CREATE INDEX directive_replies_by_age ON directive_replies (created_at);
