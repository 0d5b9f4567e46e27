-- 0009: a random secret of this installation (256 bits, hex), made once. hubd answers
-- `/healthz?challenge=<nonce>` with an HMAC of the nonce under it (hubd/identity.py), so that `hubd doctor`,
-- which reads the same database, can tell this hubd from another server at the public URL. randomblob() is
-- SQLite's PRNG, seeded from the operating system's randomness. Used for nothing else; never shown.
INSERT INTO meta (key, value) VALUES ('instance_secret', lower(hex(randomblob(32))));
