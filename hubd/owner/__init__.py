"""The owner's control: the devices page and its API (overrides), admin tokens and sessions, config reload."""
