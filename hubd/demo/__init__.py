"""`hubd demo`: the hub and the simulators in one process (`run`), and the home automation beside it."""
