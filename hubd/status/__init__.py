"""The status page and its API: what hubd knows of devices, users, events and problems, for the LAN."""
