"""The zigbee2mqtt dialect reading real installations' bridge/devices lists and states: what each real model
becomes on the platform, which values report, how topics map to devices, and bad input (tests/fixtures/zigbee2mqtt,
each with its source). Pure: no broker."""

from __future__ import annotations

import json
from typing import Any

from dialect_helpers import calls_made
from zigbee2mqtt_helpers import (
    NOW,
    announce,
    availability,
    configs,
    entries,
    fixture,
    make,
    operations,
    publish,
    rejected,
    replay_states,
    states,
    unexported,
)

from hubd.dialects import convert
from hubd.dialects.base import InputRejected, StateReceived

WEATHER = "0x0017880104e45522"
BULB = "0x000b57fffec6a5b2"
HUE_GO = "0x000b57fffec6a5b4"
PLUG = "0x0017880104e45524"
ZIGFRED = "0xf4ce368a38be56a1"
CONTACT = "0x00158d00091e7bd6"
MOTION = "0x00158d0007e778c1"
LEAK = "0x00158d00094d5a84"
SHUTTER = "0x70ac08fffee6dd5e"
DOUBLE = "0xcc86ecfffe4e9d25"
BOSCH = "0x18fc2600000d7ae2"
IMMAX = "0x00158d0007703a01"
LOCK = "0x000b57fffe0d4c01"


def suite() -> list[dict[str, Any]]:
    return entries("z2m_2.12.1_testsuite")


def nurikk_messages() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = fixture("nurikk_frontend_home")["messages"]
    return messages


# The device list.


def test_every_interviewed_supported_device_of_the_list_is_imported_and_the_rest_is_explained() -> None:
    dialect = make()
    found = configs(announce(dialect, suite()))

    assert sorted(found) == sorted([BULB, HUE_GO, f"{HUE_GO}-scene_1", "0x000b57fffec6a5c2", WEATHER, PLUG, ZIGFRED,
                                    *(f"{ZIGFRED}-state_l{n}" for n in range(2, 8))])  # the Hue Go's Chill scene
    left_out = {u.name: u.reasons for u in dialect.unexported_devices()}
    assert left_out["Coordinator"][0].startswith("the Coordinator")
    assert "not supported" in left_out["0x0017880104e45518"][0]
    assert left_out["remote"][0] == ("nothing it exposes has a platform interface (battery, action_duration, action, "
                                  "linkquality); declare it in doorbells to make its action a DoorbellPress")
    assert "button" in left_out  # a button exports nothing undeclared


def test_disabled_and_not_yet_interviewed_devices_are_not_imported_and_a_1x_list_is() -> None:
    devices = suite()
    by_name = {d["friendly_name"]: d for d in devices}
    by_name["bulb"]["disabled"] = True
    by_name["power_plug"]["interview_state"] = "IN_PROGRESS"
    by_name["power_plug"]["interview_completed"] = False
    dialect = make()

    found = configs(announce(dialect, devices))

    assert BULB not in found and PLUG not in found
    assert unexported(dialect)["bulb"][0] == "disabled in zigbee2mqtt"
    assert "not interviewed" in unexported(dialect)["power_plug"][0]
    old = entries("aqara_WSDCGQ11LM_temperature")  # zigbee2mqtt 1.33: interview_completed, no interview_state
    assert "interview_state" not in old[0]
    assert list(configs(announce(make(), old))) == ["0x00158d00040726f1"]


def test_an_ikea_bulb_is_a_dimmable_white_light_named_after_its_friendly_name_with_its_make() -> None:
    dialect = make()
    bulb = configs(announce(dialect, entries("ikea_LED1545G12_bulb")))[BULB]

    assert bulb.config.displayName == "bulb"
    assert bulb.config.displayType == "light"
    assert operations(bulb) == {"Brightness": ("Set", "SetMax", "SetMin", "Adjust"),
                                "ColorTemperature": ("Set", "SetMax", "SetMin", "Adjust"), "Switch": ("On", "Off")}
    assert bulb.config.additionalInfo == {"manufacturer": "IKEA", "model": "LED1545G12"}
    assert bulb.route.dialect == bulb.origin.source == "zigbee2mqtt"
    # {"state": "ON", "brightness": 215, "color_temp": 325}: 215/254, and 325 mireds on its 250..454 scale.
    assert states(replay_states(dialect, "ikea_LED1545G12_bulb")) == \
        {BULB: {"Switch": "On", "Brightness": 85, "ColorTemperature": 63}}


def test_a_hue_colour_bulb_reports_rgb_in_colour_mode_and_colour_temperature_in_white_mode() -> None:
    dialect = make()
    go = configs(announce(dialect, entries("philips_7146060PH_hue_go")))[HUE_GO]
    assert set(operations(go)) == {"Switch", "Brightness", "ColorTemperature", "Color"}

    first, second, third = (states(publish(dialect, "bulb_color_2", s["payload"]))
                            for s in fixture("philips_7146060PH_hue_go")["states"])

    assert first == {HUE_GO: {"ColorTemperature": 100}}  # 100 mireds, below its 150: the coolest
    assert second == {HUE_GO: {"Color": convert.rgb_from_xy(0.1, 0.5)}}  # xy mode: its colour, not color_temp 79
    assert third == {HUE_GO: {"ColorTemperature": convert.color_temperature_percent_from_mireds(300, 150, 500)}}


def test_a_colour_in_hue_and_saturation_mode_is_read_from_them() -> None:
    dialect = make()
    announce(dialect, entries("philips_7146060PH_hue_go"))

    found = publish(dialect, "bulb_color_2", {"color_mode": "hs", "color": {"hue": 30, "saturation": 100,
                                                                            "x": 0.1, "y": 0.1}})

    assert states(found) == {HUE_GO: {"Color": convert.rgb_from_hs(30, 100)}}


def test_a_recorded_hue_bulb_in_white_mode_reports_its_colour_temperature_not_its_stale_colour() -> None:
    dialect = make()
    announce(dialect, entries("philips_9290012573A_colour_bulb"))

    found = states(replay_states(dialect, "philips_9290012573A_colour_bulb"))

    assert found == {"0x0017880104dfc05e": {"Switch": "On", "Brightness": 39, "ColorTemperature": 13}}


def test_endpoint_suffixed_lights_and_covers_are_separate_endpoints() -> None:
    found = configs(announce(make(), entries("z2m_2.12.1_testsuite")))

    assert found[ZIGFRED].config.displayType == "light"
    assert found[f"{ZIGFRED}-state_l2"].config.displayName == "zigfred_plus Two"
    cover = found[f"{ZIGFRED}-state_l6"]
    assert cover.config.displayType == "curtain"
    assert operations(cover) == {"MotionSwitch": ("Off",), "Position": ("Set", "Adjust"), "Switch": ("On", "Off")}
    assert json.loads(cover.route.address)["features"][0]["props"]["position"] == "position_l6"


def test_a_dual_gang_switch_keeps_l1_on_the_device_and_splits_l2_off() -> None:
    dialect = make()
    found = configs(announce(dialect, entries("moes_MS-104BZ_dual_switch")))

    assert sorted(found) == [DOUBLE, f"{DOUBLE}-state_l2"]
    assert found[DOUBLE].config.displayType == "switch"
    assert found[f"{DOUBLE}-state_l2"].config.displayName == "Moes switch double Two"
    assert states(replay_states(dialect, "moes_MS-104BZ_dual_switch")) == {f"{DOUBLE}-state_l2": {"Switch": "On"}}


def test_a_plug_is_a_socket() -> None:
    plug = configs(announce(make(), suite()))[PLUG]

    assert plug.config.displayType == "socket"
    assert operations(plug) == {"Switch": ("On", "Off")}


def test_a_temperature_sensor_reports_temperature_and_humidity_never_battery_or_linkquality() -> None:
    dialect = make()
    sensor = configs(announce(dialect, entries("aqara_WSDCGQ11LM_temperature")))["0x00158d00040726f1"]
    assert sensor.config.displayType == "unknown"
    assert operations(sensor) == {"Humidity": (), "Temperature": ()}

    inputs = replay_states(dialect, "aqara_WSDCGQ11LM_temperature")

    assert states(inputs) == {"0x00158d00040726f1": {"Temperature": 20.74, "Humidity": 44}}


def test_each_state_reports_its_exported_values_and_only_those() -> None:
    # Which of them changed is the registry's to tell (tests/test_device_messages.py), as for every dialect.
    dialect = make()
    announce(dialect, entries("aqara_WSDCGQ11LM_temperature"))
    name = "Living Room temperature, humidity and pressure sensor"
    full = fixture("aqara_WSDCGQ11LM_temperature")["states"][0]["payload"]
    sensor = "0x00158d00040726f1"

    assert states(publish(dialect, name, full)) == {sensor: {"Temperature": 20.74, "Humidity": 44}}
    assert states(publish(dialect, name, {**full, "battery": 99, "linkquality": 60, "voltage": 2990,
                                          "pressure": 950})) == {sensor: {"Temperature": 20.74, "Humidity": 44}}
    assert states(publish(dialect, name, {**full, "temperature": 21.3, "linkquality": 61})) == \
        {sensor: {"Temperature": 21.3, "Humidity": 44}}


def test_a_contact_sensor_reports_open_as_on_and_closed_as_off() -> None:
    dialect = make()
    sensor = configs(announce(dialect, entries("aqara_MCCGQ11LM_contact")))[CONTACT]
    assert operations(sensor) == {"Switch": ()}
    assert sensor.config.capabilities[0].proactivelyReported

    opened, closed = (states(publish(dialect, "Contact sensor", s["payload"]))
                      for s in fixture("aqara_MCCGQ11LM_contact")["states"])

    assert opened == {CONTACT: {"Switch": "On"}}  # contact: false
    assert closed == {CONTACT: {"Switch": "Off"}}  # contact: true means closed


def test_a_motion_sensor_reports_occupancy_and_a_report_without_it_keeps_the_last() -> None:
    dialect = make()
    announce(dialect, entries("aqara_RTCGQ11LM_motion"))
    detected, clear, other = (publish(dialect, "Occupancy sensor", s["payload"])
                              for s in fixture("aqara_RTCGQ11LM_motion")["states"])

    assert states(detected) == {MOTION: {"Switch": "On"}}
    assert states(clear) == {MOTION: {"Switch": "Off"}}
    assert states(other) == {MOTION: {"Switch": "Off"}}  # battery, illuminance, voltage: the last occupancy


def test_a_leak_sensor_is_an_alarm_and_battery_low_never_reports() -> None:
    dialect = make()
    sensor = configs(announce(dialect, entries("aqara_SJCGQ11LM_leak")))[LEAK]
    assert sensor.config.displayType == "alarm"

    dry, low_battery, leak = (publish(dialect, "Leak sensor", s["payload"])
                              for s in fixture("aqara_SJCGQ11LM_leak")["states"])

    assert states(dry) == {LEAK: {"Switch": "Off"}}
    assert states(low_battery) == {LEAK: {"Switch": "Off"}}  # battery_low never reports: the leak as it was
    assert states(leak) == {LEAK: {"Switch": "On"}}


def test_a_leak_sensor_keeps_its_alarm_and_its_tamper_switch_splits_off() -> None:
    devices = entries("aqara_SJCGQ11LM_leak")
    devices[0]["definition"]["exposes"].append({"type": "binary", "name": "tamper", "property": "tamper",
                                                "value_on": True, "value_off": False, "access": 1})
    dialect = make()

    found = configs(announce(dialect, devices))

    assert sorted(found) == [LEAK, f"{LEAK}-tamper"]  # "tamper" < "water_leak", yet the leak is the device
    assert found[f"{LEAK}-tamper"].config.displayType == "alarm"
    assert states(publish(dialect, "Leak sensor", {"water_leak": True, "tamper": False})) == \
        {LEAK: {"Switch": "On"}, f"{LEAK}-tamper": {"Switch": "Off"}}


def test_a_cover_has_position_open_close_and_stop_and_reports_its_position() -> None:
    dialect = make()
    shutter = configs(announce(dialect, entries("moes_MS-108ZR_cover")))[SHUTTER]

    assert shutter.config.displayType == "curtain"
    assert operations(shutter) == {"MotionSwitch": ("Off",), "Position": ("Set", "Adjust"), "Switch": ("On", "Off")}
    positions = [states(publish(dialect, "Window shutter", s["payload"]))
                 for s in fixture("moes_MS-108ZR_cover")["states"]]
    assert positions == [{SHUTTER: {"Position": 10, "Switch": "On"}}, {SHUTTER: {"Position": 90, "Switch": "On"}},
                         {SHUTTER: {"Position": 50, "Switch": "On"}}]


def test_a_trv_is_a_thermostat_whose_temperature_is_its_setpoint_and_its_room_temperature_splits_off() -> None:
    dialect = make()
    found = configs(announce(dialect, entries("bosch_BTH-RA_trv")))
    trv, room = found[BOSCH], found[f"{BOSCH}-local_temperature"]

    assert trv.config.displayType == "thermostat"
    assert operations(trv) == {"Mode": ("Heat",), "Temperature": ("Set", "Adjust")}
    assert trv.config.additionalInfo["minTemperature"] == "5" and trv.config.additionalInfo["maxTemperature"] == "30"
    assert room.config.displayName == "bosch_radiator Local temperature"
    assert operations(room) == {"Temperature": ()}
    update = {"occupied_heating_setpoint": 21.5, "local_temperature": 19.2, "system_mode": "heat",
              "running_state": "heat", "pi_heating_demand": 40, "battery": 100, "linkquality": 80}
    assert states(publish(dialect, "bosch_radiator", update)) == \
        {BOSCH: {"Temperature": 21.5, "Mode": "Heat"}, f"{BOSCH}-local_temperature": {"Temperature": 19.2}}


def test_a_trv_with_an_off_mode_is_switched_by_its_system_mode() -> None:
    dialect = make()
    trv = configs(announce(dialect, entries("immax_07703L_trv")))[IMMAX]
    assert operations(trv) == {"Mode": ("Auto", "Heat"), "Switch": ("On", "Off"), "Temperature": ("Set", "Adjust")}

    found = [states(publish(dialect, "Bedroom radiator", s["payload"])) for s in fixture("immax_07703L_trv")["states"]]

    room = {f"{IMMAX}-local_temperature": {"Temperature": 19.5}}
    assert found == [room, {IMMAX: {"Temperature": 21.5}, **room},
                     {IMMAX: {"Temperature": 21.5, "Switch": "Off"}, **room},
                     {IMMAX: {"Temperature": 21.5, "Mode": "Auto", "Switch": "On"}, **room},
                     {IMMAX: {"Temperature": 21.5, "Mode": "Heat", "Switch": "On"}, **room}]


def test_a_lock_is_locked_by_voice_and_reports_locked_as_on() -> None:
    dialect = make()
    lock = configs(announce(dialect, entries("danalock_V3-BTZB_lock")))[LOCK]

    assert lock.config.displayType == "door"
    assert operations(lock) == {"Switch": ("On",)}  # locking only: there is no Switch.Off to unlock with
    assert states(replay_states(dialect, "danalock_V3-BTZB_lock")) == {LOCK: {"Switch": "Off"}}


def test_a_child_lock_and_an_away_mode_switch_are_settings_not_a_door_or_a_switch() -> None:
    thermostat = configs(announce(make(), entries("moes_BHT-002_thermostat")))["0xa4c138f402dfba8a"]
    immax = configs(announce(make(), entries("immax_07703L_trv")))[IMMAX]

    assert thermostat.config.displayType == "thermostat"
    notes = {n.name: n for n in (*thermostat.origin.entities, *immax.origin.entities)}
    assert not notes["lock.state"].exported and "child lock" in notes["lock.state"].reason
    assert not notes["switch.state"].exported and "away_mode" in notes["switch.state"].reason


def test_access_bits_decide_operations_reporting_and_retrievability() -> None:
    devices = entries("ikea_LED1545G12_bulb")
    light = next(e for e in devices[0]["definition"]["exposes"] if e["type"] == "light")
    for feature in light["features"]:
        feature["access"] = {"state": 7, "brightness": 1, "color_temp": 2}.get(feature["name"], feature["access"])
    bulb = configs(announce(make(), devices))[BULB]

    caps = {c.interface: c for c in bulb.config.capabilities}
    assert caps["Switch"].supportedOperations == ("On", "Off") and caps["Switch"].retrievable
    assert caps["Brightness"].supportedOperations == () and caps["Brightness"].proactivelyReported
    assert caps["ColorTemperature"].supportedOperations != ()
    assert not caps["ColorTemperature"].proactivelyReported and not caps["ColorTemperature"].retrievable


def test_every_expose_feature_has_a_note_saying_whether_it_is_exported_and_why() -> None:
    found = configs(announce(make(), entries("aqara_WSDCGQ11LM_temperature")))
    notes = {n.name: n for n in found["0x00158d00040726f1"].origin.entities}

    assert notes["numeric.temperature"].exported and notes["numeric.humidity"].exported
    assert not notes["numeric.battery"].exported and notes["numeric.battery"].reason == \
        "no platform interface for battery"
    assert not notes["numeric.linkquality"].exported


def test_a_fan_has_switch_and_fan_speed_from_its_mode() -> None:
    devices = entries("ikea_LED1545G12_bulb")  # zigbee2mqtt's documented fan expose on a device entry
    devices[0]["definition"]["exposes"] = [{"type": "fan", "features": [
        {"type": "binary", "name": "state", "property": "fan_state", "value_on": "ON", "value_off": "OFF", "access": 7},
        {"type": "enum", "name": "mode", "property": "fan_mode",
         "values": ["off", "low", "medium", "high", "on", "auto", "smart"], "access": 7}]}]
    dialect = make()
    fan = configs(announce(dialect, devices))[BULB]

    assert fan.config.displayType == "fan"
    assert set(operations(fan)) == {"Switch", "FanSpeed"}
    assert states(publish(dialect, "bulb", {"fan_state": "ON", "fan_mode": "medium"})) == \
        {BULB: {"Switch": "On", "FanSpeed": 66}}


# Topics.


def test_friendly_names_with_slashes_map_to_the_longest_known_name() -> None:
    dialect = make()
    devices = next(m["payload"] for m in nurikk_messages() if m["topic"] == "bridge/devices")
    assert isinstance(devices, list)
    window = next(d for d in devices if d["friendly_name"] == "livingroom/window")
    outer = json.loads(json.dumps(window)) | {"friendly_name": "livingroom", "ieee_address": "0x00158d0001e1a800"}
    found = configs(announce(dialect, [*devices, outer]))
    assert found["0x00158d0001e1a85a"].config.displayName == "livingroom/window"

    assert states(publish(dialect, "livingroom/window", {"contact": True})) == {"0x00158d0001e1a85a": {"Switch": "Off"}}
    assert states(publish(dialect, "livingroom", {"contact": False})) == {"0x00158d0001e1a800": {"Switch": "On"}}
    assert availability(publish(dialect, "livingroom/window/availability", "offline")) == \
        {"0x00158d0001e1a85a": False}


def test_a_recorded_home_imports_its_devices_and_reads_every_recorded_state_and_availability() -> None:
    dialect = make()
    inputs = []
    for message in nurikk_messages():
        inputs += publish(dialect, str(message["topic"]), message["payload"], retained=True)

    assert rejected(inputs) == []
    assert "0xbc33acfffe17628b" not in configs(inputs)  # an IKEA remote still interviewing
    assert states(inputs)["0x00158d0001fa4f2f"] == {"Temperature": 25.84, "Humidity": 66}  # livingroom/temp_humidity
    assert availability(inputs)["0x0017880104292f0a"] is False  # hue1: {"state": "Offline"}
    assert availability(inputs)["0x00158d0001e1a85a"] is True  # livingroom/window: legacy "online"


def test_set_get_action_and_attribute_subtopics_are_not_states() -> None:
    dialect = make()
    announce(dialect, suite())

    for rest in ("bulb/set", "bulb/get", "bulb/set/state", "button/action", "bulb/brightness", "bridge/info",
                 "bridge/event", "some_group"):
        assert publish(dialect, rest, {"state": "OFF", "brightness": 1}) == []


def test_garbage_states_are_rejected_naming_the_topic_and_the_good_values_still_count() -> None:
    dialect = make()
    announce(dialect, suite())

    inputs = publish(dialect, "bulb", {"state": "MAYBE", "brightness": "lots", "color_temp": 300})

    assert [type(i) for i in inputs] == [StateReceived, InputRejected, InputRejected]
    assert states(inputs) == {BULB: {"ColorTemperature": convert.color_temperature_percent_from_mireds(300, 250, 454)}}
    assert all(r.startswith("zigbee2mqtt/bulb: ") for r in rejected(inputs))
    # The bad values are not kept: the next state is read for what it brings, and nothing is refused again.
    after = publish(dialect, "bulb", {"state": "ON", "color_temp": 300})
    assert rejected(after) == [] and states(after) == {BULB: {"Switch": "On", "ColorTemperature": 75}}


def test_a_state_that_is_not_a_json_object_is_rejected_with_the_fix() -> None:
    dialect = make()
    announce(dialect, suite())

    for payload in ("ON", "[1, 2]", "{", '{"a": ' * 40 + "1" + "}" * 40):
        reasons = rejected(publish(dialect, "bulb", payload))
        assert len(reasons) == 1 and "advanced.output" in reasons[0]
    assert publish(dialect, "bulb", "") == []  # a cleared retained state


# Bad input.


def test_a_malformed_device_list_is_rejected_and_changes_nothing() -> None:
    dialect = make(max_devices=5)
    announce(dialect, entries("aqara_MCCGQ11LM_contact"))

    for payload in ("not json", '{"devices": []}', json.dumps(suite()), "\xff", "[" * 100 + "]" * 100,
                    "[" * 50_000 + "]" * 50_000, "[1, 2]"):
        inputs = announce(dialect, payload)
        assert len(inputs) == 1 and isinstance(inputs[0], InputRejected), payload[:20]
        assert inputs[0].reason.startswith("zigbee2mqtt/bridge/devices: ")
    assert announce(dialect, "") == []
    assert states(publish(dialect, "Contact sensor", {"contact": False})) == {CONTACT: {"Switch": "On"}}


def test_malformed_entries_and_unknown_exposes_are_rejected_and_the_rest_imports() -> None:
    devices: list[Any] = suite()
    weather = next(d for d in devices if d["friendly_name"] == "weather_sensor")
    weather["definition"]["exposes"].insert(0, {"type": "hologram", "name": "x", "property": "x", "access": 1})
    weather["definition"]["exposes"].insert(0, {"type": "numeric", "name": "humidity"})
    devices += [42, {"ieee_address": None, "friendly_name": "ghost"}, {"ieee_address": "0x1", "friendly_name": "a#b"}]
    dialect = make()

    inputs = announce(dialect, devices)

    reasons = rejected(inputs)
    assert len(reasons) == 5
    assert any("type 'hologram'" in r and "weather_sensor (0x0017880104e45522)" in r for r in reasons)
    assert any("entry 10 is a int" in r for r in reasons)
    assert operations(configs(inputs)[WEATHER]) == {"Humidity": (), "Temperature": ()}
    assert len(configs(inputs)) == 13  # the other devices import as without the bad entries (a scene included)


def test_the_dialect_claims_only_its_base_topic() -> None:
    dialect = make(base="z2m/home")

    assert dialect.subscriptions() == [("z2m/home/#", 1)]
    assert dialect.claims("z2m/home/bridge/devices") and not dialect.claims("zigbee2mqtt/bridge/devices")
    assert not dialect.claims("z2m/homeassistant/x")
    assert dialect.pending_subscriptions() == []
    assert publish(dialect, "bridge/state", "online", base="z2m/home", at=NOW) == []


def test_a_full_state_costs_the_same_with_ten_devices_as_with_a_thousand() -> None:
    def work(devices: int) -> int:
        dialect = make()
        listing = []
        for i in range(devices):
            entry = entries("aqara_WSDCGQ11LM_temperature")[0]
            entry.update(ieee_address=f"0x00158d00{i:08x}", friendly_name=f"Room {i:04d}/Aqara weather")
            listing.append(entry)
        announce(dialect, listing)
        state = {"battery": 95, "device_temperature": 24, "humidity": 40.5, "linkquality": 45,
                 "power_outage_count": 1605, "pressure": 951.7, "temperature": 20.5,
                 "update": {"installed_version": -1, "latest_version": -1, "state": "idle"},
                 "update_available": False, "voltage": 2905}
        publish(dialect, "Room 0007/Aqara weather", state)
        state["temperature"] = 20.6  # one exported value changes, as in the bench's zigbee2mqtt scenario
        found: list[Any] = []
        calls = calls_made(lambda: found.extend(publish(dialect, "Room 0007/Aqara weather", state, at=NOW + 1)))
        assert states(found) == {"0x00158d0000000007": {"Temperature": 20.6, "Humidity": 40}}
        return calls

    assert work(10) == work(1_000)  # nothing per message is proportional to the number of devices


def test_two_devices_with_one_friendly_name_keep_the_first_and_say_so() -> None:
    first = entries("ikea_LED1545G12_bulb")[0]
    second = {**first, "ieee_address": "0x0000000000000099"}
    inputs = announce(make(), [first, second])

    assert list(configs(inputs)) == [first["ieee_address"]]
    assert rejected(inputs) == [
        f"zigbee2mqtt/bridge/devices: entry 1: friendly_name {first['friendly_name']!r} of 0x0000000000000099 is also "
        f"{first['ieee_address']}'s, so their states share one topic; hubd keeps {first['ieee_address']}: rename one "
        "of them in zigbee2mqtt"]
