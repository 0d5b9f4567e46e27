"""The Home Assistant discovery dialect decoding real producers' configs and states (ESPHome, zigbee2mqtt,
Tasmota, OpenMQTTGateway: tests/fixtures/homeassistant, each with its source). Pure: no broker."""

from __future__ import annotations

import json

from homeassistant_helpers import (
    FIXTURES,
    NOW,
    announce,
    configs,
    fixture,
    make,
    operations,
    presses,
    publish,
    raw,
    replay_states,
    restarted,
    routes,
    states,
)

from hubd.devices.model import Route, StateSample
from hubd.dialects.base import (
    AvailabilityReceived,
    ConfigReceived,
    DeviceGone,
    InputRejected,
    PressReceived,
    StateReceived,
)

ESP = "20500de464ec"
LED = f"{ESP}-garage_esp_status_led"  # its status LED, split off: the board's own endpoint is its door and sensors
WEATHER = "zigbee2mqtt_0x0017880104e45522"


def test_an_esphome_board_is_one_endpoint_named_after_its_device_with_its_make_and_notes() -> None:
    found = configs(announce(make(), "esphome_garagedoor1_sht3x"))

    assert list(found) == [ESP, LED]
    device = found[ESP]
    assert device.config.displayName == "GarageDoor1"
    assert device.config.displayType == "unknown"  # its door position and its readings, never its status LED
    assert operations(device) == {"Humidity": (), "Switch": (), "Temperature": ()}
    assert device.config.additionalInfo == {"manufacturer": "Espressif", "model": "esp32",
                                            "swVersion": "2026.8.0 (config hash 0x0dd1e1e6)"}
    assert device.route.dialect == "homeassistant"
    notes = {n.name: n for n in device.origin.entities}
    assert device.origin.source == "homeassistant"
    assert notes["sensor.garage_temperature"].exported
    # A binary sensor without a device class is an on/off sensor, as Home Assistant shows it: the door holds the
    # board's Switch; the status LED (a light, but no function of the board's) splits off, named after both.
    assert notes["binary_sensor.garage_door_position"].exported and "light.garage_esp_status_led" not in notes
    led = found[LED]
    assert led.config.displayName == "GarageDoor1 Garage ESP Status LED" and led.config.displayType == "light"
    assert operations(led) == {"Switch": ("On", "Off")}


def test_an_esphome_board_reports_its_sensors_and_light_and_availability() -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_sht3x")

    inputs = replay_states(dialect, "esphome_garagedoor1_sht3x")

    assert states(inputs) == {ESP: {"Temperature": 21.5, "Humidity": 48, "Switch": "Off"}, LED: {"Switch": "On"}}
    assert [i for i in inputs if isinstance(i, AvailabilityReceived)] == [AvailabilityReceived(ESP, True),
                                                                          AvailabilityReceived(LED, True)]
    assert publish(dialect, "garagedoor1/status", "offline") == [AvailabilityReceived(ESP, False),
                                                                  AvailabilityReceived(LED, False)]
    stamp = next(i for i in inputs if isinstance(i, StateReceived)).samples[0].time_of_sample
    assert stamp == "2023-11-14T22:13:20.000Z"


def test_an_esphome_temperature_sensor_reports_celsius_from_fahrenheit() -> None:
    dialect = make()
    config = json.loads(fixture("esphome_garagedoor1_sht3x")["configs"][0]["payload"])
    config["unit_of_meas"] = "°F"
    dialect.decode("homeassistant/sensor/garagedoor1/garage_temperature/config", raw(config), NOW, True)

    assert states(publish(dialect, "garagedoor1/sensor/garage_temperature/state", "71.6")) == \
        {ESP: {"Temperature": 22}}


def test_a_kelvin_temperature_is_reported_in_celsius() -> None:
    dialect = make()
    config = {"name": "Probe", "stat_t": "probe/t", "dev_cla": "temperature", "unit_of_meas": "K", "uniq_id": "p1"}
    dialect.decode("homeassistant/sensor/probe/config", raw(config), NOW, True)

    assert states(publish(dialect, "probe/t", "295.15")) == {"p1": {"Temperature": 22}}


def test_tasmota_abbreviations_and_a_leading_tilde_are_expanded() -> None:
    dialect = make()
    device = configs(announce(dialect, "tasmota_leak_18A6B3"))["18A6B3"]

    assert device.config.displayType == "alarm"
    assert ("tasmota_18A6B3/stat/Moisture", 1) in dialect.pending_subscriptions()
    inputs = replay_states(dialect, "tasmota_leak_18A6B3")
    assert states(inputs) == {"18A6B3": {"Switch": "On"}}
    assert AvailabilityReceived("18A6B3", True) in inputs


def test_a_trailing_tilde_is_the_base_topic() -> None:
    dialect = make()
    config = {"~": "plug/one", "name": "Plug", "cmd_t": "set/~", "stat_t": "~/state", "uniq_id": "plug1",
              "dev_cla": "outlet"}
    found = configs(dialect.decode("homeassistant/switch/plug1/config", raw(config), NOW, True))

    assert found["plug1"].config.displayType == "socket"
    assert dialect.claims("plug/one/state")
    assert json.loads(found["plug1"].route.address)["entities"][0]["config"]["command_topic"] == "set/plug/one"


def _device_based(components: dict[str, object]) -> bytes:
    # The shape of Home Assistant's documented device-based discovery payload.
    return raw({"dev": {"ids": "ea334450945afc", "name": "Kitchen", "mf": "Bla electronics", "mdl": "xya",
                        "sw": "1.0", "sa": "Kitchen"},
                "o": {"name": "bla2mqtt", "sw": "2.1", "url": "https://bla2mqtt.example.com/support"},
                "cmps": components, "state_topic": "sensorBedroom/state", "qos": 2})


TEMP_CMP = {"p": "sensor", "device_class": "temperature", "unit_of_measurement": "°C",
            "value_template": "{{ value_json.temperature }}", "unique_id": "temp01ae_t"}
HUM_CMP = {"p": "sensor", "device_class": "humidity", "unit_of_measurement": "%",
           "value_template": "{{ value_json.humidity }}", "unique_id": "temp01ae_h"}


def test_a_device_based_config_announces_its_components_as_one_device() -> None:
    dialect = make()
    inputs = dialect.decode("homeassistant/device/kitchen/config",
                            _device_based({"some_unique_component_id1": TEMP_CMP, "some_unique_id2": HUM_CMP}),
                            NOW, True)

    device = configs(inputs)["ea334450945afc"]
    assert operations(device) == {"Humidity": (), "Temperature": ()}
    assert device.config.recommendRoomName == "Kitchen"
    assert states(publish(dialect, "sensorBedroom/state", '{"temperature": 23.1, "humidity": 40}')) == \
        {"ea334450945afc": {"Temperature": 23.1, "Humidity": 40}}


def test_a_device_based_component_with_only_its_platform_is_removed_and_an_empty_payload_removes_all() -> None:
    dialect = make()
    topic = "homeassistant/device/kitchen/config"
    dialect.decode(topic, _device_based({"t": TEMP_CMP, "h": HUM_CMP}), NOW, True)

    device = configs(dialect.decode(topic, _device_based({"t": TEMP_CMP, "h": {"p": "sensor"}}), NOW, True))
    assert operations(device["ea334450945afc"]) == {"Temperature": ()}
    assert dialect.decode(topic, b"", NOW, True) == [DeviceGone("ea334450945afc")]


def test_removing_the_last_exported_entity_removes_the_device() -> None:
    dialect = make()
    announce(dialect, "z2m_contact_MCCGQ11LM")
    device = "zigbee2mqtt_0x0017880104e45547"

    battery_gone = dialect.decode("homeassistant/sensor/0x0017880104e45547/battery/config", b"", NOW, True)
    assert [type(i) for i in battery_gone] == [ConfigReceived]  # its notes changed; it is still there
    assert [n.name for n in configs(battery_gone)[device].origin.entities] == ["binary_sensor.contact"]
    assert dialect.decode("homeassistant/binary_sensor/0x0017880104e45547/contact/config", b"", NOW, True) == \
        [DeviceGone(device)]
    assert not dialect.claims("zigbee2mqtt/door_sensor")


def test_a_changed_config_is_announced_again_and_an_unchanged_one_is_not() -> None:
    dialect = make()
    announce(dialect, "z2m_light_LED1545G12")
    config = fixture("z2m_light_LED1545G12")["configs"][0]

    assert dialect.decode(config["topic"], raw(config["payload"]), NOW, True) == []
    changed = dict(config["payload"], supported_color_modes=["xy", "color_temp"])
    again = configs(dialect.decode(config["topic"], raw(changed), NOW, True))
    assert "Color" in operations(again["zigbee2mqtt_0x000b57fffec6a5b2"])


def test_a_two_gang_switch_splits_its_second_gang_onto_its_own_endpoint() -> None:
    dialect = make()
    found = configs(announce(dialect, "z2m_switch_QBKG03LM"))
    main, split = "zigbee2mqtt_0x0017880104e45542", "zigbee2mqtt_0x0017880104e45542-switch_right"

    assert set(found) == {main, split}
    assert found[split].config.displayName == "wall_switch_double Right"
    assert states(replay_states(dialect, "z2m_switch_QBKG03LM")) == {main: {"Switch": "On"}, split: {"Switch": "Off"}}


def test_the_alphabetically_first_object_id_keeps_the_main_endpoint_whatever_the_arrival_order() -> None:
    forward, backward = make(), make()
    announce(forward, "z2m_switch_QBKG03LM")
    for config in reversed(fixture("z2m_switch_QBKG03LM")["configs"]):
        backward.decode(config["topic"], raw(config["payload"]), NOW, True)

    for dialect in (forward, backward):
        out = publish(dialect, "zigbee2mqtt/wall_switch_double", {"state_left": "ON", "state_right": "OFF"})
        assert states(out) == {"zigbee2mqtt_0x0017880104e45542": {"Switch": "On"},
                               "zigbee2mqtt_0x0017880104e45542-switch_right": {"Switch": "Off"}}


def test_entities_that_share_only_a_connection_are_one_device() -> None:
    dialect = make()
    base = {"dev_cla": "temperature", "unit_of_meas": "°C"}
    first = {**base, "stat_t": "a", "uniq_id": "a", "dev": {"ids": "board", "cns": [["mac", "AA:BB"]]}}
    dialect.decode("homeassistant/sensor/a/config", raw(first), NOW, True)
    out = dialect.decode("homeassistant/binary_sensor/b/config",
                         raw({"stat_t": "b", "uniq_id": "b", "dev_cla": "motion",
                              "dev": {"cns": [["mac", "aa:bb"]], "name": "Hall"}}), NOW, True)

    assert list(configs(out)) == ["board"]
    assert operations(configs(out)["board"]) == {"Switch": (), "Temperature": ()}


def test_include_and_exclude_apply_per_entity_and_exclude_wins() -> None:
    dialect = make(include=["weather*"], exclude=["*_humidity_zigbee2mqtt"])
    found = configs(announce(dialect, "z2m_weather_WSDCGQ11LM", "z2m_fan"))

    assert list(found) == [WEATHER]
    notes = {n.name: n for n in found[WEATHER].origin.entities}
    assert operations(found[WEATHER]) == {"Temperature": ()}
    assert notes["sensor.humidity"].reason == "left out by homeassistant.include/exclude"


def test_devices_zigbee2mqtt_announced_are_left_to_the_native_import_when_it_is_on() -> None:
    dialect = make(defer_zigbee2mqtt=True)

    assert announce(dialect, "z2m_weather_WSDCGQ11LM", "z2m_fan") == []
    assert not dialect.claims("zigbee2mqtt/weather_sensor")
    assert list(configs(announce(dialect, "tasmota_relay_FB6A07"))) == ["FB6A07"]


def test_entities_hubd_cannot_export_are_listed_with_the_reason() -> None:
    found = configs(announce(make(), "z2m_weather_WSDCGQ11LM"))[WEATHER]
    notes = {n.name: (n.exported, n.reason) for n in found.origin.entities}

    assert notes["sensor.pressure"] == (False, "no platform interface for device_class atmospheric_pressure")
    assert notes["sensor.battery"] == (False, "a device's diagnostic entity (entity_category diagnostic): never "
                                              "exported, as Home Assistant never exposes one to a voice assistant")
    assert notes["sensor.temperature"] == (True, "")


def test_a_device_with_nothing_to_export_is_listed_with_why() -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_sht3x")
    dialect.decode("homeassistant/sensor/x/rssi/config",
                   raw({"stat_t": "x/rssi", "uniq_id": "rssi", "dev_cla": "signal_strength", "dev": {"ids": "x",
                                                                                                      "name": "X"}}),
                   NOW, True)

    [left_out] = dialect.unexported_devices()
    assert (left_out.endpoint_id, left_out.name) == ("x", "X")  # the endpointId it would have: its identifier
    assert left_out.reasons == ("sensor.rssi: no platform interface for device_class signal_strength",)


def test_bad_configs_are_rejected_with_the_topic_and_never_raise() -> None:
    dialect = make()
    cases = {
        "homeassistant/toaster/t1/config": b"{}",
        "homeassistant/sensor/bad id!/config": b"{}",
        "homeassistant/sensor/s1/config": b"{not json",
        "homeassistant/sensor/s2/config": b"[1, 2]",
        "homeassistant/switch/s3/config": b'{"uniq_id": "s3"}',
        "homeassistant/sensor/s4/config": b'{"stat_t": "+/#", "dev_cla": "temperature"}',
        "homeassistant/sensor/s5/config": b'{"stat_t": "a", "dev_cla": "temperature", "val_tpl": "{{ x "}',
        "homeassistant/light/s6/config": b'{"cmd_t": "a", "schema": "fancy"}',
        "homeassistant/sensor/s7/config": b"[" * 5000,
    }
    for topic, payload in cases.items():
        out = dialect.decode(topic, payload, NOW, True)
        assert len(out) == 1 and isinstance(out[0], InputRejected), (topic, out)
        assert topic.split("/")[-2] in out[0].reason or "toaster" in out[0].reason
    assert dialect.decode("homeassistant/status", b"online", NOW, False) == []


def test_ten_thousand_configs_are_taken_and_past_the_limit_refused() -> None:
    dialect = make(max_entities=10_000)
    accepted = 0
    for i in range(10_050):
        config = {"name": f"Plug {i}", "cmd_t": f"plug/{i}/set", "stat_t": f"plug/{i}", "uniq_id": f"plug{i}",
                  "val_tpl": "{{ value_json.POWER }}", "dev": {"ids": f"plug{i}", "name": f"Plug {i}"}}
        out = dialect.decode(f"homeassistant/switch/plug{i}/config", raw(config), NOW, True)
        accepted += sum(isinstance(o, ConfigReceived) for o in out)
    assert accepted == 10_000
    assert isinstance(out[0], InputRejected) and "homeassistant.exclude" in out[0].reason
    assert dialect.templates.compiles == 1


def test_a_contact_sensor_reports_open_as_on() -> None:
    dialect = make()
    device = configs(announce(dialect, "z2m_contact_MCCGQ11LM"))["zigbee2mqtt_0x0017880104e45547"]
    capability = device.config.capabilities[0]

    assert (device.config.displayType, capability.interface, capability.supportedOperations) == \
        ("unknown", "Switch", ())
    assert capability.proactivelyReported and capability.retrievable
    closed, opened = (publish(dialect, "zigbee2mqtt/door_sensor", s["payload"])
                      for s in fixture("z2m_contact_MCCGQ11LM")["states"][1:])
    assert states(closed) == {"zigbee2mqtt_0x0017880104e45547": {"Switch": "Off"}}
    assert states(opened) == {"zigbee2mqtt_0x0017880104e45547": {"Switch": "On"}}


def test_occupancy_reports_detected_as_on_and_a_leak_is_an_alarm() -> None:
    dialect = make()
    found = configs(announce(dialect, "z2m_occupancy_RTCGQ11LM", "z2m_leak_SJCGQ11LM"))

    assert found["zigbee2mqtt_0x0017880104e45549"].config.displayType == "alarm"
    assert states(replay_states(dialect, "z2m_occupancy_RTCGQ11LM"))["zigbee2mqtt_0x0017880104e45546"] == \
        {"Switch": "Off"}
    assert states(replay_states(dialect, "z2m_leak_SJCGQ11LM")) == {"zigbee2mqtt_0x0017880104e45549": {"Switch": "On"}}


def test_a_json_light_reports_brightness_and_colour_temperature_as_percentages() -> None:
    dialect = make()
    announce(dialect, "z2m_light_LED1545G12")

    assert states(replay_states(dialect, "z2m_light_LED1545G12")) == \
        {"zigbee2mqtt_0x000b57fffec6a5b2": {"Switch": "On", "Brightness": 50, "ColorTemperature": 0}}


def test_an_rgb_light_reports_its_colour_as_one_rgb_integer() -> None:
    dialect = make()
    device = configs(announce(dialect, "esphome_rgb_light"))["a4cf12b3c4d5"]

    assert device.config.recommendRoomName == "Office"
    assert states(replay_states(dialect, "esphome_rgb_light")) == \
        {"a4cf12b3c4d5": {"Switch": "On", "Brightness": 50, "Color": 0xFF8800}}


def test_a_basic_light_reads_its_attribute_topics_through_its_templates() -> None:
    dialect = make()
    config = {"name": "Lamp", "uniq_id": "lamp1", "cmd_t": "cmnd/lamp/POWER", "stat_t": "tele/lamp/STATE",
              "stat_val_tpl": "{{ value_json.POWER }}", "bri_cmd_t": "cmnd/lamp/Dimmer",
              "bri_stat_t": "tele/lamp/STATE", "bri_scl": 100, "bri_val_tpl": "{{ value_json.Dimmer }}",
              "hs_cmd_t": "cmnd/lamp/HSBColor", "hs_stat_t": "tele/lamp/STATE",
              "hs_val_tpl": "{{ value_json.HSBColor.split(',')[0:2] | join(',') }}"}
    dialect.decode("homeassistant/light/lamp1/config", raw(config), NOW, True)

    out = publish(dialect, "tele/lamp/STATE", {"POWER": "ON", "Dimmer": 40, "HSBColor": "120,100,40"})
    assert states(out) == {"lamp1": {"Switch": "On", "Brightness": 40, "Color": 0x00FF00}}


def test_a_thermostat_reports_its_target_and_mode_with_its_limits_and_its_room_temperature_apart() -> None:
    dialect = make()
    found = configs(announce(dialect, "z2m_climate_tuya_TS0601_thermostat"))
    device = found["zigbee2mqtt_0x0017882104a44559"]
    room = found["zigbee2mqtt_0x0017882104a44559-current_temperature"]  # as the native import's local_temperature
    assert room.config.displayName == "thermostat Room temperature"  # "TS0601" is a model code: left out
    assert operations(room) == {"Temperature": ()} and room.config.displayType == "unknown"

    assert device.config.displayType == "thermostat"
    assert operations(device) == {"Mode": ("Auto", "Heat"), "Switch": ("On", "Off"), "Temperature": ("Set", "Adjust")}
    assert (device.config.additionalInfo["minTemperature"], device.config.additionalInfo["maxTemperature"]) == \
        ("5", "35")
    assert states(replay_states(dialect, "z2m_climate_tuya_TS0601_thermostat")) == \
        {"zigbee2mqtt_0x0017882104a44559": {"Temperature": 21.5, "Mode": "Heat", "Switch": "On"},
         "zigbee2mqtt_0x0017882104a44559-current_temperature": {"Temperature": 19.8}}


def test_a_cover_reports_its_position_and_that_it_is_open() -> None:
    dialect = make()
    device = configs(announce(dialect, "z2m_cover_position_keenhome_SV01"))["zigbee2mqtt_0x0017880104e45551"]

    assert device.config.displayType == "curtain"
    assert operations(device) == {"MotionSwitch": ("Off",), "Position": ("Set", "Adjust"), "Switch": ("On", "Off")}
    assert states(replay_states(dialect, "z2m_cover_position_keenhome_SV01")) == \
        {"zigbee2mqtt_0x0017880104e45551": {"Position": 40, "Switch": "On", "MotionSwitch": "Off"}}


def test_a_fan_reports_its_speed_step_as_a_percentage() -> None:
    dialect = make()
    announce(dialect, "z2m_fan")

    assert states(replay_states(dialect, "z2m_fan")) == \
        {"zigbee2mqtt_0x0017880104e45548": {"Switch": "On", "FanSpeed": 50}}


def test_a_tasmota_relay_reads_power_from_its_telemetry() -> None:
    dialect = make()
    announce(dialect, "tasmota_relay_FB6A07")

    inputs = replay_states(dialect, "tasmota_relay_FB6A07")
    assert states(inputs) == {"FB6A07": {"Switch": "On"}}
    assert AvailabilityReceived("FB6A07", True) in inputs


def test_an_openmqttgateway_template_with_is_defined_reads_its_sensor() -> None:
    dialect = make()
    announce(dialect, "openmqttgateway_pilight_temperature")

    assert states(replay_states(dialect, "openmqttgateway_pilight_temperature")) == \
        {"240AC4EC20DC": {"Temperature": -16.6}}
    other = publish(dialect, "home/cc1101-ec20dc/PilighttoMQTT", {"message": {"id": 12, "temperature": 3}})
    assert other == []


def test_a_template_that_fails_is_rejected_naming_the_entity_and_the_template() -> None:
    dialect = make()
    config = {"stat_t": "s/t", "dev_cla": "temperature", "uniq_id": "t1", "val_tpl": "{{ value | float }}"}
    dialect.decode("homeassistant/sensor/t1/config", raw(config), NOW, True)

    out = publish(dialect, "s/t", "warm")
    assert len(out) == 1 and isinstance(out[0], InputRejected)
    assert "sensor.t1" in out[0].reason and "value_template '{{ value | float }}'" in out[0].reason
    assert states(publish(dialect, "s/t", "20")) == {"t1": {"Temperature": 20}}


def test_a_value_that_is_not_a_number_is_rejected_and_an_unknown_one_ignored() -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_sht3x")

    assert isinstance(publish(dialect, "garagedoor1/sensor/garage_temperature/state", "hot")[0], InputRejected)
    assert publish(dialect, "garagedoor1/sensor/garage_temperature/state", "unknown") == []
    assert not dialect.claims("zigbee2mqtt/nothing")


def test_a_template_is_compiled_once_not_per_message() -> None:
    dialect = make(doorbells=[{"device": "button", "event": "single"}])
    announce(dialect, "z2m_weather_WSDCGQ11LM", "z2m_remote_WXKG11LM")
    compiled = dialect.templates.compiles

    for i in range(50):
        replay_states(dialect, "z2m_weather_WSDCGQ11LM")
        publish(dialect, "zigbee2mqtt/button", {"action": "single", "n": i})
    assert dialect.templates.compiles == compiled
    # Four sensors with their own value templates, one availability template, the event's template.
    assert compiled <= 6


def test_availability_all_any_and_latest() -> None:
    sequences: dict[str, list[tuple[str, str, bool | None]]] = {
        "all": [("a", "online", None), ("b", "online", True), ("a", "offline", False)],
        "any": [("a", "offline", None), ("b", "online", True), ("b", "offline", False)],
        "latest": [("a", "online", True), ("b", "offline", False), ("a", "online", True)]}
    for mode, sequence in sequences.items():
        dialect = make()
        config = {"stat_t": "t/state", "dev_cla": "motion", "uniq_id": "m1", "avty_mode": mode,
                  "avty": [{"t": "t/a"}, {"t": "t/b", "pl_avail": "1", "pl_not_avail": "0"}]}
        dialect.decode("homeassistant/binary_sensor/m1/config", raw(config), NOW, True)
        for topic, text, expected in sequence:
            text = {"online": "1", "offline": "0"}[text] if topic == "b" else text
            out = publish(dialect, f"t/{topic}", text)
            assert out == ([] if expected is None else [AvailabilityReceived("m1", expected)]), (mode, topic, text)


def test_zigbee2mqtt_bridge_state_sets_the_availability_of_its_devices() -> None:
    dialect = make()
    announce(dialect, "z2m_weather_WSDCGQ11LM", "z2m_fan")

    out = publish(dialect, "zigbee2mqtt/bridge/state", {"state": "offline"})
    assert out == [AvailabilityReceived(WEATHER, False), AvailabilityReceived("zigbee2mqtt_0x0017880104e45548", False)]
    assert publish(dialect, "zigbee2mqtt/bridge/state", {"state": "offline"}) == []


DOORBELL_EVENT = {"name": "Doorbell", "stat_t": "door/bell", "dev_cla": "doorbell", "evt_typ": ["press"],
                  "uniq_id": "bell1", "dev": {"ids": "bell", "name": "Front door"}}


def test_a_doorbell_event_entity_presses_on_each_event_but_never_when_retained() -> None:
    dialect = make()
    device = configs(dialect.decode("homeassistant/event/bell1/config", raw(DOORBELL_EVENT), NOW, True))["bell"]

    assert (device.config.displayType, device.config.capabilities) == ("unknown", ())
    assert publish(dialect, "door/bell", {"event_type": "press"}, at=NOW + 1) == \
        [PressReceived("bell", "2023-11-14T22:13:21.000Z")]
    assert presses(publish(dialect, "door/bell", {"event_type": "press"})) == ["bell"]
    assert publish(dialect, "door/bell", {"event_type": "press"}, retained=True) == []


def test_a_declared_doorbell_presses_once_per_press_of_a_zigbee2mqtt_button() -> None:
    dialect = make(doorbells=[{"device": "butt*", "event": "single"}])
    device = configs(announce(dialect, "z2m_remote_WXKG11LM"))["zigbee2mqtt_0x0017880104e45520"]
    notes = {n.name: n for n in device.origin.entities}

    assert notes["event.action"].exported and "single" in notes["event.action"].reason
    one_press = replay_states(dialect, "z2m_remote_WXKG11LM")  # the JSON state and the /action topic
    assert presses(one_press) == ["zigbee2mqtt_0x0017880104e45520"]
    assert presses(publish(dialect, "zigbee2mqtt/button", {"action": "double"})) == []


def test_a_declared_doorbell_on_a_device_trigger_presses() -> None:
    dialect = make(doorbells=[{"device": "zigbee2mqtt_0x0017880104e45520", "event": "single"}])
    trigger = fixture("z2m_remote_WXKG11LM")["configs"][0]
    device = configs(dialect.decode(trigger["topic"], raw(trigger["payload"]), NOW, True))

    assert list(device) == ["zigbee2mqtt_0x0017880104e45520"]
    assert presses(publish(dialect, "zigbee2mqtt/button/action", "single")) == ["zigbee2mqtt_0x0017880104e45520"]
    assert presses(publish(dialect, "zigbee2mqtt/button/action", "double")) == []
    assert publish(dialect, "zigbee2mqtt/button/action", "single", retained=True) == []


def test_a_button_that_is_not_declared_is_not_a_doorbell() -> None:
    found = configs(announce(make(), "z2m_remote_WXKG11LM"))

    assert found == {}


def test_availability_changes_never_press() -> None:
    dialect = make(doorbells=[{"device": "Front door", "event": "press"}])
    config = dict(DOORBELL_EVENT, avty_t="door/status")
    dialect.decode("homeassistant/event/bell1/config", raw(config), NOW, True)

    assert publish(dialect, "door/status", "online") == [AvailabilityReceived("bell", True)]
    assert publish(dialect, "door/status", "offline") == [AvailabilityReceived("bell", False)]


def test_state_topics_are_subscribed_once_known_and_the_prefix_covers_discovery() -> None:
    dialect = make()
    assert dialect.subscriptions() == [("homeassistant/#", 1)]

    announce(dialect, "z2m_weather_WSDCGQ11LM")
    assert dialect.pending_subscriptions() == [("zigbee2mqtt/weather_sensor", 1), ("zigbee2mqtt/bridge/state", 1)]
    assert dialect.pending_subscriptions() == []
    announce(dialect, "z2m_weather_WSDCGQ11LM")
    assert dialect.pending_subscriptions() == []
    assert dialect.subscriptions() == [("homeassistant/#", 1), ("zigbee2mqtt/bridge/state", 1),
                                       ("zigbee2mqtt/weather_sensor", 1)]
    assert dialect.claims("homeassistant/sensor/x/config") and not dialect.claims("hubd/device/x/state")


def test_a_bad_update_of_a_config_leaves_the_entity_as_it_was() -> None:
    dialect = make()
    announce(dialect, "tasmota_relay_FB6A07")

    out = dialect.decode("homeassistant/switch/FB6A07_RL_1/config", b'{"cmd_t": 5, "val_tpl": "{{"}', NOW, True)
    assert len(out) == 1 and isinstance(out[0], InputRejected)
    assert states(publish(dialect, "tele/tasmota_FB6A07/STATE", {"POWER": "OFF"})) == {"FB6A07": {"Switch": "Off"}}


# After a restart: hubd's persistent session delivers the states queued for it right after CONNACK, before the
# retained discovery configs (which come after the SUBACK of `homeassistant/#`). The dialect reads them from the
# routes the registry kept (restore), and the configs that follow change nothing.

ALL_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.json"))
BUTTON_DOORBELL = [{"device": "button", "event": "single"}]


def test_states_queued_before_discovery_are_read_after_a_restart() -> None:
    before = announce(make(), "esphome_garagedoor1_sht3x", "z2m_weather_WSDCGQ11LM")
    dialect = restarted(before)

    topic = "garagedoor1/sensor/garage_temperature/state"
    assert dialect.claims(topic)
    assert dialect.decode(topic, b"21.5", NOW, False) == \
        [StateReceived(ESP, (StateSample("Temperature", 21.5, "2023-11-14T22:13:20.000Z"),))]
    assert states(publish(dialect, "zigbee2mqtt/weather_sensor", {"temperature": 19.5, "humidity": 61.2})) == \
        {WEATHER: {"Temperature": 19.5, "Humidity": 61}}
    assert ("garagedoor1/sensor/garage_temperature/state", 1) in dialect.subscriptions()
    assert ("zigbee2mqtt/weather_sensor", 1) in dialect.subscriptions()


def test_every_fixture_reads_its_states_after_a_restart_as_before_it() -> None:
    original = make(doorbells=BUTTON_DOORBELL)
    before = announce(original, *ALL_FIXTURES)
    dialect = restarted(before, doorbells=BUTTON_DOORBELL)

    assert dialect.subscriptions() == original.subscriptions()
    for name in ALL_FIXTURES:
        assert replay_states(dialect, name) == replay_states(original, name), name


def test_rediscovery_after_a_restore_reports_nothing_new() -> None:
    before = announce(make(doorbells=BUTTON_DOORBELL), *ALL_FIXTURES)
    dialect = restarted(before, doorbells=BUTTON_DOORBELL)

    again = announce(dialect, *ALL_FIXTURES)
    announced = [i for i in again if isinstance(i, ConfigReceived)]
    refused = [i for i in again if isinstance(i, InputRejected)]  # a config hubd refuses is refused again, as before
    assert len(announced) + len(refused) == len(again)
    assert refused == [i for i in before if isinstance(i, InputRejected)]
    # A device that had entities hubd does not export is announced again as their notes come back, with the
    # same config and route (the registry compares configs: it reports nothing); the others are not at all.
    last = configs(before)
    for item in announced:
        known = last[item.device_id]
        assert (item.config.canonical(), item.route) == (known.config.canonical(), known.route), item
    assert {i: c.origin for i, c in configs(again).items()} == {i: last[i].origin for i in configs(again)}
    assert announce(restarted(before), "z2m_light_LED1545G12") == []
    assert dialect.subscriptions() == restarted(before, doorbells=BUTTON_DOORBELL).subscriptions()


def test_availability_is_restored_with_its_templates_payloads_and_mode() -> None:
    dialect = restarted(announce(make(), "z2m_light_LED1545G12", "esphome_garagedoor1_sht3x"))

    assert publish(dialect, "zigbee2mqtt/bridge/state", {"state": "offline"}) == \
        [AvailabilityReceived("zigbee2mqtt_0x000b57fffec6a5b2", False)]
    assert publish(dialect, "garagedoor1/status", "online") == [AvailabilityReceived(ESP, True),
                                                                 AvailabilityReceived(LED, True)]

    config = {"stat_t": "t/state", "dev_cla": "motion", "uniq_id": "m1", "avty_mode": "all",
              "avty": [{"t": "t/a"}, {"t": "t/b", "pl_avail": "1", "pl_not_avail": "0"}]}
    dialect = restarted(make().decode("homeassistant/binary_sensor/m1/config", raw(config), NOW, True))
    assert publish(dialect, "t/a", "online") == []  # all: t/b is not known yet
    assert publish(dialect, "t/b", "1") == [AvailabilityReceived("m1", True)]
    assert publish(dialect, "t/a", "offline") == [AvailabilityReceived("m1", False)]


def test_a_split_two_gang_switch_is_restored_onto_both_its_endpoints() -> None:
    before = announce(make(), "z2m_switch_QBKG03LM")
    main, split = "zigbee2mqtt_0x0017880104e45542", "zigbee2mqtt_0x0017880104e45542-switch_right"
    assert [d for d, _ in routes(before)] == [main, split]
    dialect = restarted(before)

    assert states(publish(dialect, "zigbee2mqtt/wall_switch_double", {"state_left": "ON", "state_right": "OFF"})) \
        == {main: {"Switch": "On"}, split: {"Switch": "Off"}}
    assert announce(dialect, "z2m_switch_QBKG03LM") == []


def test_an_empty_config_removes_a_restored_entity() -> None:
    dialect = restarted(announce(make(), "z2m_light_LED1545G12"))
    assert dialect.decode("homeassistant/light/0x000b57fffec6a5b2/light/config", b"", NOW, True) == \
        [DeviceGone("zigbee2mqtt_0x000b57fffec6a5b2")]
    assert not dialect.claims("zigbee2mqtt/bulb")

    topic = "homeassistant/device/kitchen/config"
    dialect = restarted(make().decode(topic, _device_based({"t": TEMP_CMP, "h": HUM_CMP}), NOW, True))
    assert states(publish(dialect, "sensorBedroom/state", {"temperature": 20, "humidity": 40})) == \
        {"ea334450945afc": {"Temperature": 20, "Humidity": 40}}
    assert dialect.decode(topic, b"", NOW, True) == [DeviceGone("ea334450945afc")]


def test_a_restored_entity_stays_until_its_config_is_emptied() -> None:
    before = announce(make(), "esphome_garagedoor1_sht3x")
    dialect = restarted(before)
    temperature, humidity = (c for c in fixture("esphome_garagedoor1_sht3x")["configs"][:2])
    assert "temperature" in temperature["topic"] and "humidity" in humidity["topic"]

    dialect.decode(temperature["topic"], raw(temperature["payload"]), NOW, True)  # the humidity never comes
    assert states(publish(dialect, "garagedoor1/sensor/garage_humidity/state", "50")) == {ESP: {"Humidity": 50}}
    gone = configs(dialect.decode(humidity["topic"], b"", NOW, True))
    assert "Humidity" not in operations(gone[ESP])


def test_a_device_keeps_its_id_while_its_configs_come_back_one_by_one() -> None:
    # Its id comes from an entity hubd does not export (the first by discovery id), which no route keeps.
    plain = {"stat_t": "hall/x", "uniq_id": "x", "dev": {"ids": ["board", "hall"], "name": "Hall"}}
    temperature = {"stat_t": "hall/t", "uniq_id": "t", "dev_cla": "temperature", "unit_of_meas": "°C",
                   "dev": {"ids": ["hall"], "name": "Hall"}}
    topics = {"homeassistant/binary_sensor/x/config": plain, "homeassistant/sensor/t/config": temperature}
    original = make()
    before = [i for t, c in topics.items() for i in original.decode(t, raw(c), NOW, True)]
    assert [d for d, _ in routes(before)] == ["board"]
    dialect = restarted(before)

    assert states(publish(dialect, "hall/t", "20")) == {"board": {"Temperature": 20}}
    again = [i for t, c in reversed(topics.items()) for i in dialect.decode(t, raw(c), NOW, True)]
    assert again == [i for i in again if isinstance(i, ConfigReceived) and i.device_id == "board"]
    assert states(publish(dialect, "hall/t", "21")) == {"board": {"Temperature": 21}}


def test_what_include_exclude_changed_across_the_restart_is_reported_when_the_configs_come_again() -> None:
    before = announce(make(), "z2m_light_LED1545G12", "z2m_fan", "z2m_weather_WSDCGQ11LM")
    dialect = restarted(before, exclude=["bulb", "*_humidity_zigbee2mqtt"])

    assert not dialect.claims("zigbee2mqtt/bulb") and dialect.claims("zigbee2mqtt/fan")
    assert announce(dialect, "z2m_light_LED1545G12") == [DeviceGone("zigbee2mqtt_0x000b57fffec6a5b2")]
    assert announce(dialect, "z2m_fan") == []
    assert operations(configs(announce(dialect, "z2m_weather_WSDCGQ11LM"))[WEATHER]) == {"Temperature": ()}

    # The left gang left out: the right one is on the device's own endpoint now, and its split-off one is gone.
    before = announce(make(), "z2m_switch_QBKG03LM")
    dialect = restarted(before, exclude=["*_switch_left_*"])
    main = "zigbee2mqtt_0x0017880104e45542"
    assert states(publish(dialect, "zigbee2mqtt/wall_switch_double", {"state_right": "ON"})) == \
        {main: {"Switch": "On"}}
    again = announce(dialect, "z2m_switch_QBKG03LM")
    assert again[1:] == [DeviceGone(f"{main}-switch_right")]
    assert json.loads(configs(again)[main].route.address)["entities"][0]["key"][1].endswith("switch_right")


def test_a_route_the_restore_cannot_read_restores_nothing() -> None:
    dialect = make()
    v1 = json.dumps({"v": 1, "entities": [{"component": "switch", "name": "switch.plug", "interfaces": ["Switch"],
                                            "config": {"command_topic": "plug/set"}}]})
    dialect.restore([("plug", Route("homeassistant", v1)), ("bad", Route("homeassistant", "{not json")),
                     ("odd", Route("homeassistant", '{"v": 2, "entities": [{"key": 5}]}')),
                     ("native", Route("native", "{}"))])

    assert dialect.subscriptions() == [("homeassistant/#", 1)]
    assert not dialect.claims("plug/set")


def test_a_zigbee2mqtt_lights_route_address_stays_small() -> None:
    light = configs(announce(make(), "z2m_light_LED1545G12"))["zigbee2mqtt_0x000b57fffec6a5b2"]
    address = json.loads(light.route.address)

    assert len(light.route.address) < 800  # 677 characters: its config without what hubd never reads
    config = address["entities"][0]["config"]
    assert "device" not in config and address["device"]["name"] == "bulb"
    assert not {"effect", "effect_list", "object_id", "default_entity_id"} & set(config)
    assert set(address["device"]) == {"identifiers", "manufacturer", "model", "name"}
    assert config["origin"] == {"name": "Zigbee2MQTT"}


def test_with_the_native_import_on_only_its_own_installation_is_left_to_it() -> None:
    """A zigbee2mqtt on another base topic than the one hubd imports natively still comes in through discovery."""
    from hubd.config.model import HomeAssistantConfig, Zigbee2MqttConfig
    from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
    from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

    def imported(base: str) -> list[str]:
        native = Zigbee2MqttDialect(Zigbee2MqttConfig(enabled=True, base_topic=base), [])
        dialect = HomeAssistantDialect(HomeAssistantConfig(enabled=True), [], natives=[native])
        return [i.device_id for i in announce(dialect, "z2m_light_LED1545G12") if isinstance(i, ConfigReceived)]

    assert imported("zigbee2mqtt") == []  # the fixture's state topic is zigbee2mqtt/bulb: the native import's
    assert imported("zigbee2mqtt-upstairs") == ["zigbee2mqtt_0x000b57fffec6a5b2"]
