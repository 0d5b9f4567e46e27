"""Devices as the platform takes them: the interface table, conformance, and the device-command port."""
