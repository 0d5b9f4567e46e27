"""`hubd backup` and `hubd restore`: the database, the config and (if asked) the secrets in one file, and back."""
