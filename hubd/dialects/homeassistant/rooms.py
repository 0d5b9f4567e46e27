"""A climate's room readings: its room temperature and humidity, as sensors of the same device.

A thermostat's Temperature is its setpoint; the room temperature (`current_temperature_topic`) and humidity
(`current_humidity_topic`) it reports are derived sensor configs (object_ids current_temperature and
current_humidity, keyed under the climate's discovery id), which the device's endpoints put together on one
split-off endpoint (`<device>-current_temperature`, ROOM_GROUP). A problem in one is named by the climate's key
the producer sent (`as_sent`). Imports the discovery reader.
"""

from __future__ import annotations

from typing import Any

from hubd.dialects.homeassistant.discovery import DiscoveryTopic, EntityConfig

# A climate's room readings, exported as sensors of their own (split off the thermostat, whose Temperature is its
# setpoint): (the climate's topic key, its template key, the derived sensor's object_id, device class, unit key).
_ROOM_READINGS = (("current_temperature_topic", "current_temperature_template", "current_temperature", "temperature",
                   "temperature_unit"),
                  ("current_humidity_topic", "current_humidity_template", "current_humidity", "humidity", None))
_SHARED_WITH_READINGS = ("device", "origin", "availability", "availability_topic", "availability_template",
                         "availability_mode", "payload_available", "payload_not_available", "qos")


ROOM_GROUP = "current_temperature"  # the room readings' endpoint: `<device>-current_temperature`


def room_reading_of(key: tuple[str, str]) -> tuple[str, str] | None:
    """The climate's key, when `key` is one of its room readings (room_readings); None for any other entity."""
    component, discovery_id = key
    climate, _, object_id = discovery_id.rpartition(" ")
    if component != "sensor" or not climate or object_id not in {r[2] for r in _ROOM_READINGS}:
        return None
    return "climate", climate


def as_sent(problem: str, sent_as: tuple[tuple[str, str], ...]) -> str:
    """A derived config's problem named by the key the producer sent ("value_template: empty" of a room reading is
    "current_temperature_template: empty")."""
    for derived, producer in sent_as:
        if problem.startswith(f"{derived}:"):
            return f"{producer}{problem[len(derived):]}"
    return problem


def room_readings(entity: EntityConfig) -> list[EntityConfig]:
    """A climate's room temperature and humidity as sensor configs of the same device (removals when its config
    is gone or no longer has them). Only for a climate with a device block: the sensor must be of its device."""
    if entity.topic.component != "climate":
        return []
    data = entity.config
    if data is not None and not isinstance(data.get("device"), dict):
        return []
    out = []
    for topic_key, template_key, object_id, device_class, unit_key in _ROOM_READINGS:
        where = DiscoveryTopic("sensor", entity.topic.key[1], object_id)
        topic = data.get(topic_key) if data is not None else None
        if data is None or not isinstance(topic, str):
            out.append(EntityConfig(where, None))
            continue
        config: dict[str, Any] = {k: data[k] for k in _SHARED_WITH_READINGS if k in data}
        sent_as = [("state_topic", topic_key), ("value_template", template_key)]
        if unit_key:
            sent_as.append(("unit_of_measurement", unit_key))
        config.update({"state_topic": topic, "device_class": device_class,
                       "name": "Room temperature" if device_class == "temperature" else "Room humidity"})
        if isinstance(data.get(template_key), str):
            config["value_template"] = data[template_key]
        unit = data.get(unit_key) if unit_key else "%"
        if isinstance(unit, str):
            config["unit_of_measurement"] = unit
        if isinstance(data.get("unique_id"), str):
            config["unique_id"] = f"{data['unique_id']}_{object_id}"
        out.append(EntityConfig(where, config, tuple(sent_as)))
    return out
