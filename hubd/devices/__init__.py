"""Devices as the platform takes them: the device model (`model.py`), the interface table, conformance;
what hubd knows of a device (`device.py`) and the changes the registry reports (`changes.py`)."""
