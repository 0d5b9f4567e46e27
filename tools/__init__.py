"""Developer tools (not installed with hubd): `python -m tools.<name>`."""
