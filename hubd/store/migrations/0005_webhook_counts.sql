-- 0005: the webhook counts calls per token and second (refused calls count too),
-- and remembers the hashes a webhook had before `hubd webhook rotate`.

-- How many calls a token got in one second (`second` is its start, epoch seconds). A flood adds to
-- one row a second instead of one row a call. Pruned a day after the second.
CREATE TABLE webhook_call_counts (
    token_id INTEGER NOT NULL REFERENCES webhook_tokens (id) ON DELETE CASCADE,
    second   INTEGER NOT NULL,
    calls    INTEGER NOT NULL CHECK (calls > 0),
    PRIMARY KEY (token_id, second)
) WITHOUT ROWID;

INSERT INTO webhook_call_counts (token_id, second, calls)
    SELECT token_id, CAST(at AS INTEGER), count(*) FROM webhook_calls GROUP BY token_id, CAST(at AS INTEGER);

DROP TABLE webhook_calls;

-- A rotated-out URL is still recognised: it answers 404 saying it was replaced, and does not count
-- as a guess against the caller's address (a revoked token keeps its hash in webhook_tokens).
CREATE TABLE webhook_retired_hashes (
    token_hash TEXT PRIMARY KEY,             -- SHA-256 hex, like webhook_tokens.token_hash
    token_id   INTEGER NOT NULL REFERENCES webhook_tokens (id) ON DELETE CASCADE,
    retired_at REAL NOT NULL                 -- epoch seconds
) WITHOUT ROWID;
