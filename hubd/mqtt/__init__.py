"""MQTT: the paho adapter (client.py), topic/payload parsing and the bridge component."""
