"""MQTT: the paho adapter (client.py), the embedded broker and the bridge component that feeds the dialects."""
