"""Issue 33 item 1, names a voice can say, for every producer: every real device fixture (tests/fixtures/**, each
with its source) through its dialect gives each endpoint the name its owner would say (CONTRACT section 6, the
rules of hubd.dialects.naming), and the status page's reason says why hubd chose it. Pure: no broker."""

from __future__ import annotations

import json
import re

import homeassistant_helpers as ha
import pytest
import tasmota_helpers as tasmota
from fixture_names import fixtures, names

from hubd.dialects import naming
from hubd.dialects.homeassistant import names as discovery_names
from hubd.dialects.homeassistant.discovery import DeviceInfo

# What the platform hears for each endpoint of each fixture (numbers spelled, as hubd sends them).
EXPECTED: dict[str, dict[str, str]] = {
    "homeassistant/esphome_garagedoor1_lock": {
        "20500de464ec": "GarageDoor One",
    },
    "homeassistant/esphome_garagedoor1_sht3x": {
        "20500de464ec": "GarageDoor One",
        "20500de464ec-garage_esp_status_led": "GarageDoor One Garage ESP Status LED",
    },
    "homeassistant/esphome_garagedoor1_restart_button": {
    },
    "homeassistant/esphome_livingroom_climate": {
        "a4cf12aa0b1c": "livingroom",
        "a4cf12aa0b1c-current_temperature": "livingroom Room temperature",
    },
    "homeassistant/esphome_rgb_light": {
        "a4cf12b3c4d5": "DeskLamp",
    },
    "homeassistant/openmqttgateway_ble_LYWSD03MMC_A4C1386B2F1E": {  # its state topic +/+/BTtoMQTT/A4C1386B2F1E
        "A4C1386B2F1E": "ATC",
    },
    "homeassistant/openmqttgateway_gateway_system": {
        "240AC4EC20DC": "Sensor",
    },
    "homeassistant/openmqttgateway_pilight_temperature": {
        "240AC4EC20DC": "Thermometer",
    },
    "homeassistant/rtl_433_P40_ID51778": {
        "ID51778": "Thermometer",
    },
    "homeassistant/rtl_433_acurite_986": {
        "Acurite-986-1R-51778": "Acurite thermometer",
    },
    "homeassistant/rtl_433_honeywell_door_contact": {
    },
    "homeassistant/rtl_433_door_temperature": {
        "Generic-Door-1-4242": "Generic Door",
    },
    "homeassistant/shelly_plusi4_CC7B5C8AEA2C": {
        "cc7b5c8aea2c": "PlusI Four",
        "cc7b5c8aea2c-input1-state": "PlusI Four BinaryIn Two",
        "cc7b5c8aea2c-input2-state": "PlusI Four BinaryIn Three",
        "cc7b5c8aea2c-input3-state": "PlusI Four BinaryIn Four",
    },
    "homeassistant/shelly_script_plus1_C4DD57877294": {
        "shellyplus1-c4dd57877294-relay-0": "Allterco switch",
        "shellyplus1-c4dd57877294-input-0": "Allterco sensor",
    },
    "homeassistant/tasmota_bme280_DC4492": {
        "DC4492": "Thermometer",
    },
    "homeassistant/tasmota_button_FB6A07": {
    },
    "homeassistant/tasmota_leak_18A6B3": {
        "18A6B3": "WaterMeterLeak",
    },
    "homeassistant/tasmota_mculed_AC54C1": {
        "AC54C1": "MCULED",
    },
    "homeassistant/tasmota_opentherm_BB050B": {
    },
    "homeassistant/tasmota_relay_FB6A07": {
        "FB6A07": "Garage Door",
    },
    "homeassistant/tasmota_six_gang_860695": {
        "860695": "Switch One",
        "860695-860695_RL_2": "Switch Two",
    },
    "homeassistant/z2m_climate_tuya_TS0601_thermostat": {
        "zigbee2mqtt_0x0017882104a44559": "thermostat",
        "zigbee2mqtt_0x0017882104a44559-current_temperature": "thermostat Room temperature",
    },
    "homeassistant/z2m_contact_MCCGQ11LM": {
        "zigbee2mqtt_0x0017880104e45547": "door sensor",
    },
    "homeassistant/z2m_cover_position_keenhome_SV01": {
        "zigbee2mqtt_0x0017880104e45551": "smart vent",
    },
    "homeassistant/z2m_fan": {
        "zigbee2mqtt_0x0017880104e45548": "fan",
    },
    "homeassistant/z2m_leak_SJCGQ11LM": {
        "zigbee2mqtt_0x0017880104e45549": "leak sensor",
    },
    "homeassistant/z2m_light_LED1545G12": {
        "zigbee2mqtt_0x000b57fffec6a5b2": "bulb",
    },
    "homeassistant/z2m_occupancy_RTCGQ11LM": {
        "zigbee2mqtt_0x0017880104e45546": "motion sensor",
    },
    "homeassistant/theengs_bluemaestro_BM_V23_F35285": {  # its state topic the filter +/+/BTtoMQTT/F35285
        "F35285": "BlueMaestro thermometer",
        "F35285-F35285-tempc": "BlueMaestro thermometer BM tempc",
        "F35285-F35285-tempf": "BlueMaestro thermometer BM tempf",
    },
    "homeassistant/z2m_plug_ZNCZ02LM": {
        "zigbee2mqtt_0x0017880104e45524": "power plug",
    },
    "homeassistant/z2m_remote_WXKG11LM": {
    },
    "homeassistant/z2m_scene_7146060PH": {
        "zigbee2mqtt_0x000b57fffec6a5b4-scene_1": "Chill scene",
    },
    "homeassistant/z2m_siren_HS2WD-E": {
        "zigbee2mqtt_0x0017880104e45549": "siren",
    },
    "homeassistant/z2m_switch_QBKG03LM": {
        "zigbee2mqtt_0x0017880104e45542": "wall switch double",
        "zigbee2mqtt_0x0017880104e45542-switch_right": "wall switch double Right",
    },
    "homeassistant/z2m_thermostat_BTH-RM230Z": {
        "zigbee2mqtt_0x18fc2600000d7ae3": "Bosch Room thermostat II",
        "zigbee2mqtt_0x18fc2600000d7ae3-current_temperature": "Bosch Room thermostat II Room temperature",
    },
    "homeassistant/z2m_thermostat_centralite_3157100": {
        "zigbee2mqtt_0x000d6f000a5b3c21": "Hall thermostat",
        "zigbee2mqtt_0x000d6f000a5b3c21-current_temperature": "Hall thermostat Room temperature",
    },
    "homeassistant/z2m_weather_WSDCGQ11LM": {
        "zigbee2mqtt_0x0017880104e45522": "weather sensor",
    },
    "shelly/gen1_color_messages": {
        "shellyrgbw2-11ABD9": "Shelly RGBW Two",
    },
    "shelly/gen1_messages": {
        "shelly1": "Shelly One",
        "shellydimmer2-E09806966EFB": "Shelly Dimmer Two",
        "shellyht-123456": "Shelly H and T",
    },
    "shelly/ha_2pm_gen3": {
        "shelly2pmg3-aabbccddeeff": "Test Name",
        "shelly2pmg3-aabbccddeeff-switch-1": "Test Name Two",
    },
    "shelly/ha_2pm_gen3_cover": {
        "shelly2pmg3-aabbccddeeff": "Test Name",
    },
    "shelly/plusrgbwpm_rgb": {
        "shellyplusrgbwpm-a0a3b35c7024": "My RGBW PM PLUS",
    },
    "shelly/plusrgbwpm_rgbw": {
        "shellyplusrgbwpm-a0a3b35c7024": "My RGBW PM PLUS",
    },
    "tasmota/atomlite2_rgb_light": {
        "142B2F9FAF38": "AtomLite Two",
    },
    "tasmota/ha_binary_sensor_49A3BC": {
        "00000049A3BC": "Test",
    },
    "tasmota/ha_default_config_49A3BC": {
    },
    "zigbee2mqtt/aqara_LLKZMK12LM_dual_relay": {
        "0x54ef4410009716a8": "Aqara Dual relay module",
        "0x54ef4410009716a8-state_l2": "Aqara Dual relay module Two",
    },
    "zigbee2mqtt/aqara_MCCGQ11LM_contact": {
        "0x00158d00091e7bd6": "Contact sensor",
    },
    "zigbee2mqtt/aqara_RTCGQ11LM_motion": {
        "0x00158d0007e778c1": "Occupancy sensor",
    },
    "zigbee2mqtt/aqara_SJCGQ11LM_leak": {
        "0x00158d00094d5a84": "Leak sensor",
    },
    "zigbee2mqtt/aqara_WSDCGQ11LM_temperature": {
        "0x00158d00040726f1": "Living Room temperature humidity and pressure sensor",
    },
    "zigbee2mqtt/aqara_WXKG11LM_button": {
    },
    "zigbee2mqtt/bosch_BTH-RM230Z_thermostat": {
        "0x18fc2600000d7ae3": "Bosch Room thermostat II",
        "0x18fc2600000d7ae3-local_temperature": "Bosch Room thermostat II Local temperature",
    },
    "zigbee2mqtt/bosch_BTH-RA_trv": {
        "0x18fc2600000d7ae2": "bosch radiator",
        "0x18fc2600000d7ae2-local_temperature": "bosch radiator Local temperature",
    },
    "zigbee2mqtt/centralite_3157100_thermostat": {
        "0x000d6f000a5b3c21": "Hall thermostat",
        "0x000d6f000a5b3c21-local_temperature": "Hall thermostat Local temperature",
    },
    "zigbee2mqtt/danalock_V3-BTZB_lock": {
        "0x000b57fffe0d4c01": "Front door lock",
    },
    "zigbee2mqtt/ikea_LED1545G12_bulb": {
        "0x000b57fffec6a5b2": "bulb",
    },
    "zigbee2mqtt/immax_07703L_trv": {
        "0x00158d0007703a01": "Bedroom radiator",
        "0x00158d0007703a01-local_temperature": "Bedroom radiator Local temperature",
    },
    "zigbee2mqtt/moes_BHT-002_thermostat": {
        "0xa4c138f402dfba8a": "Moes thermo",
        "0xa4c138f402dfba8a-local_temperature": "Moes thermo Local temperature",
    },
    "zigbee2mqtt/moes_MS-104BZ_dual_switch": {
        "0xcc86ecfffe4e9d25": "Moes switch double",
        "0xcc86ecfffe4e9d25-state_l2": "Moes switch double Two",
    },
    "zigbee2mqtt/moes_MS-108ZR_cover": {
        "0x70ac08fffee6dd5e": "Window shutter",
    },
    "zigbee2mqtt/philips_7146060PH_hue_go": {
        "0x000b57fffec6a5b4": "bulb color Two",
        "0x000b57fffec6a5b4-scene_1": "Chill scene",
    },
    "zigbee2mqtt/z2m_group_scenes": {
        "0x000b57fffec6a5b4": "bulb color Two",
        "0x000b57fffec6a5b4-scene_1": "Chill scene",
        "zigbee2mqtt-group-9": "ha discovery group",
        "zigbee2mqtt-group-9-scene_4": "Scene Four",
    },
    "zigbee2mqtt/z2m_groups_living_room": {
        "0x000b57fffec6a5b2": "bulb",
        "0x000b57fffec6a5b4": "bulb color Two",
        "0x000b57fffec6a5b4-scene_1": "Chill scene",
        "zigbee2mqtt-group-1": "Living room",
    },
    "zigbee2mqtt/philips_9290012573A_colour_bulb": {
        "0x0017880104dfc05e": "hue back tv",
    },
    "zigbee2mqtt/xiaomi_WXKG01LM_button": {
    },
    "zigbee2mqtt/xiaomi_ZNLDP12LM_bulb": {
        "0x00158d000446a373": "Bathroom Mirror Light",
    },
    "zigbee2mqtt/z2m_2.12.1_testsuite": {
        "0x000b57fffec6a5b2": "bulb",
        "0x000b57fffec6a5b4": "bulb color Two",
        "0x000b57fffec6a5b4-scene_1": "Chill scene",
        "0x000b57fffec6a5c2": "IKEA TRADFRI bulb",
        "0x0017880104e45522": "weather sensor",
        "0x0017880104e45524": "power plug",
        "0xf4ce368a38be56a1": "zigfred plus",
        "0xf4ce368a38be56a1-state_l2": "zigfred plus Two",
        "0xf4ce368a38be56a1-state_l3": "zigfred plus Three",
        "0xf4ce368a38be56a1-state_l4": "zigfred plus Four",
        "0xf4ce368a38be56a1-state_l5": "zigfred plus Five",
        "0xf4ce368a38be56a1-state_l6": "zigfred plus Six",
        "0xf4ce368a38be56a1-state_l7": "zigfred plus Seven",
    },
    "homeassistant/esphome_garden_valve": {"246f28a1b2c4": "Garden"},
    "homeassistant/ha_docs_humidifier": {"bedroom_humidifier": "Bedroom humidifier"},
    "homeassistant/ha_docs_valve": {"heater_valve": "Heater valve", "heater2_valve": "Radiator valve"},
    "homeassistant/ha_docs_water_heater": {"basement_boiler": "Boiler"},
    "homeassistant/valetudo_vacuum_GentleTimelyBadger": {"GentleTimelyBadger": "Kitchen robot"},
    "homeassistant/z2m_group_light_and_switch": {"zigbee2mqtt_1221051039810110150109113116116_9": "ha discovery group"},
}
# Words no owner says of a device: programs, chips, spelled model codes and identifiers.
_NEVER = re.compile(r"\b(rtl|OMG|community|tasmota|esphome|Theengs|DS|DHT|BME|Allterco Allterco|Hundred|Thousand|"
                    r"Zero|x Zero)\b", re.IGNORECASE)


def test_every_real_fixture_is_in_the_table() -> None:
    assert sorted(EXPECTED) == fixtures()


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_each_endpoint_of_a_real_device_is_named_as_its_owner_would_say(fixture: str) -> None:
    found = names(fixture)

    assert {device_id: name for device_id, (name, _) in found.items()} == EXPECTED[fixture]
    assert not [name for name, _ in found.values() if _NEVER.search(name)]


@pytest.mark.parametrize(("fixture", "device_id", "why"), [
    ("homeassistant/rtl_433_P40_ID51778", "ID51778", "named after its model"),
    ("homeassistant/openmqttgateway_pilight_temperature", "240AC4EC20DC", "named after its model"),
    ("homeassistant/shelly_script_plus1_C4DD57877294", "shellyplus1-c4dd57877294-relay-0", "named after its model"),
    ("homeassistant/z2m_thermostat_BTH-RM230Z", "zigbee2mqtt_0x18fc2600000d7ae3", "named after its model"),
    ("zigbee2mqtt/aqara_LLKZMK12LM_dual_relay", "0x54ef4410009716a8", "left out"),
    ("homeassistant/esphome_garagedoor1_sht3x", "20500de464ec", ""),
    ("shelly/gen1_messages", "shelly1", "named after its model"),
    ("shelly/ha_2pm_gen3", "shelly2pmg3-aabbccddeeff", ""),
])
def test_the_status_page_says_why_hubd_chose_a_name(fixture: str, device_id: str, why: str) -> None:
    reason = names(fixture)[device_id][1]

    assert why in reason if why else reason == ""


# The producers' own formats, as the rules take them (CONTRACT section 6's examples).


def test_a_ble_sensor_named_after_its_macs_bytes_is_named_after_its_maker_and_what_it_is() -> None:
    """Theengs Gateway names a device by its advertisement's name, here the last bytes of its MAC (F35285), and
    gives its decoder's model_id (BM_V23) as its model."""
    config = json.loads(ha.fixture("theengs_bluemaestro_BM_V23_F35285")["configs"][0]["payload"])
    device = DeviceInfo.read(config["device"])
    assert device is not None

    name, why = discovery_names.device_name(device, ["F35285"], "thermometer") or ("", "")
    assert (name, "named after its model" in why) == ("BlueMaestro thermometer", True)


@pytest.mark.parametrize(("given", "vendor", "model", "kind", "expected"), [
    ("Wetterstation DS18B20 Temperature", None, None, "thermometer", "Wetterstation Temperature"),  # Tasmota SO19
    ("tasmota DHT11 Temperature", None, None, "thermometer", "Temperature"),  # Home Assistant's Tasmota tests
    ("H5075-AB34", "Govee", "H5075", "thermometer", "Govee thermometer"),  # a BLE sensor named model + MAC bytes
    ("ID1234", "rtl_433", "P40", "thermometer", "Thermometer"),  # rtl_433_mqtt_hass.py
    ("cc1101-ec20dc", "OMG_community", '["BME280","Pilight","BT"]', "thermometer", "Thermometer"),  # OpenMQTTGateway
    ("bosch_rm230z", "Bosch", "Room thermostat II 230V", "thermostat", "Bosch Room thermostat II"),
    ("0x000b57fffec6a5c2", "IKEA", "TRADFRI bulb E26/E27, white spectrum", "light", "IKEA TRADFRI bulb"),
    ("Lamp 2", None, None, "light", "Lamp 2"),  # digits that remain are spelled by hubd ("Lamp Two")
    ("Bedroom2", "Bosch", "x", "light", "Bedroom2"),
    ("2nd Floor Hall", None, None, "light", "2nd Floor Hall"),
    ("卧室2", None, None, "light", "卧室2"),
])
def test_programs_chips_and_identifier_parts_are_left_out_of_a_name(
        given: str, vendor: str | None, model: str | None, kind: str, expected: str) -> None:
    assert naming.device_name(given, (), vendor, model, kind)[0] == expected


def test_a_multi_relay_tasmotas_first_relay_is_named_by_its_own_friendly_name_not_the_device_name() -> None:
    """CONTRACT: on a Tasmota with more than one relay, fn[i] names relay i+1, relay 1 included (dn names the
    device): "turn off the kitchen" finds relay 1. Home Assistant's Tasmota test config with its names set."""
    config = tasmota.basic_config(dn="Kitchen Board", fn=["Kitchen", "Hall", None, None, None],
                                  rl=[1, 1, 0, 0, 0, 0, 0, 0])
    found = tasmota.configs(tasmota.announce(tasmota.make(), tasmota.BASIC, config, sensors={
        "AM2301": {"Temperature": 21.4, "Humidity": 40.2}, "TempUnit": "C"}))

    assert {k: c.config.displayName for k, c in found.items()} == {
        tasmota.BASIC: "Kitchen", f"{tasmota.BASIC}-relay2": "Hall"}

    one = tasmota.configs(tasmota.announce(tasmota.make(), tasmota.BASIC, {**config, "rl": [1, 0, 0, 0, 0, 0, 0, 0]}))
    assert one[tasmota.BASIC].config.displayName == "Kitchen Board"  # one relay: the device's name is the relay's
