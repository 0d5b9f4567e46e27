"""`hubd doctor`: every link of the chain checked, one line per check (docs/cli.md, docs/reverse-proxy.md)."""
