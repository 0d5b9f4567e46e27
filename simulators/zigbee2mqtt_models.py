"""The device models of the simulated zigbee2mqtt bridge: each one's `definition` as zigbee2mqtt 2.x lists it in
`bridge/devices`, the Zigbee fields around it, and the state a freshly paired one reports.

The definitions are copied from real bridge/devices payloads, feature by feature (`_f` writes one expose the way
zigbee-herdsman-converters serialises it; keys order does not matter, zigbee2mqtt sorts them):
- WSDCGQ11LM, LED1545G12, 7146060PH, WXKG11LM: Koenkk/zigbee2mqtt@6835cbf5 (2.12.1) test/extensions/bridge.test.ts,
  "Should publish devices on startup" (entries weather_sensor, bulb, bulb_color_2, button);
- MCCGQ11LM, MS-104BZ, MS-108ZR: Luligu/matterbridge-zigbee2mqtt@e20a2d42 src/mock/bridge-devices.json, a real
  installation's list (entries "Contact sensor", "Moes switch double", "Window shutter");
- BTH-RA: zigbee-herdsman-converters 26.90.0, findByDevice() of zigbee2mqtt's mocked RBSH-TRV0-ZB-EU, its exposes
  serialised as bridge/devices carries them.
Endpoint clusters are the same entries' (BTH-RA's are made up); bindings and reporting are left out.
Must not import hubd.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Expose = dict[str, Any]

ACCESS_STATE, ACCESS_SET, ACCESS_GET = 1, 2, 4  # zigbee-herdsman-converters' access bits


def _f(kind: str, prop: str, label: str, description: str | None, access: int = ACCESS_STATE, *,
       name: str | None = None, **more: Any) -> Expose:
    """One feature (numeric, binary, enum, text); `name` defaults to the property."""
    expose: Expose = {"access": access, "label": label, "name": name or prop, "property": prop, "type": kind, **more}
    if description is not None:
        expose["description"] = description
    return expose


def _group(features: list[Expose], **head: Any) -> Expose:
    """A specific expose (light, switch, cover, climate) or a composite, with its features."""
    return {**head, "features": features}


def _color_temp(prop: str, label: str, description: str, coolest: int, warmest: int, *,
                startup: bool = False) -> Expose:
    """A colour temperature feature with the presets zigbee-herdsman-converters gives every white-spectrum light."""
    presets = [{"description": "Coolest temperature supported", "name": "coolest", "value": coolest},
               {"description": "Cool temperature (250 mireds / 4000 Kelvin)", "name": "cool", "value": 250},
               {"description": "Neutral temperature (370 mireds / 2700 Kelvin)", "name": "neutral", "value": 370},
               {"description": "Warm temperature (454 mireds / 2200 Kelvin)", "name": "warm", "value": 454},
               {"description": "Warmest temperature supported", "name": "warmest", "value": warmest}]
    if startup:
        presets.append({"description": "Restore previous color_temp on cold power on", "name": "previous",
                        "value": 65535})
    return _f("numeric", prop, label, description, 7, presets=presets, unit="mired", value_max=warmest,
              value_min=coolest)


def _light(coolest: int, warmest: int, *extra: Expose) -> Expose:
    return _group([
        _f("binary", "state", "State", "On/off state of this light", 7, value_off="OFF", value_on="ON",
           value_toggle="TOGGLE"),
        _f("numeric", "brightness", "Brightness", "Brightness of this light", 7, value_max=254, value_min=0),
        _color_temp("color_temp", "Color temp", "Color temperature of this light", coolest, warmest),
        _color_temp("color_temp_startup", "Color temp startup", "Color temperature after cold power on of this light",
                    coolest, warmest, startup=True),
        *extra], type="light")


def _endpoints(clusters: dict[str, tuple[list[str], list[str]]]) -> dict[str, Any]:
    return {ep: {"bindings": [], "clusters": {"input": inputs, "output": outputs}, "configured_reportings": [],
                 "scenes": []} for ep, (inputs, outputs) in clusters.items()}


LINKQUALITY = _f("numeric", "linkquality", "Linkquality", "Link quality (signal strength)", category="diagnostic",
                 unit="lqi", value_max=255, value_min=0)
BATTERY = _f("numeric", "battery", "Battery", "Remaining battery in %, can take up to 24 hours before reported",
             category="diagnostic", unit="%", value_max=100, value_min=0)
VOLTAGE = _f("numeric", "voltage", "Voltage", "Voltage of the battery in millivolts", category="diagnostic", unit="mV")
DEVICE_TEMPERATURE = _f("numeric", "device_temperature", "Device temperature", "Temperature of the device",
                        category="diagnostic", unit="°C")
POWER_ON_BEHAVIOR = _f("enum", "power_on_behavior", "Power-on behavior",
                       "Controls the behavior when the device is powered on after power loss", 7, category="config",
                       values=["off", "on", "toggle", "previous"])
TRANSITION = _f("numeric", "transition", "Transition", "Controls the transition time (in seconds) of on/off, "
                "brightness, color temperature (if applicable) and color (if applicable) changes. Defaults to `0` "
                "(no transition).", ACCESS_SET, value_min=0, value_step=0.1)
COLOR_SYNC = _f("binary", "color_sync", "Color sync", "When enabled colors will be synced, e.g. if the light supports "
                "both color x/y and color temperature a conversion from color x/y to color temperature will be done "
                "when setting the x/y color (default true).", ACCESS_SET, value_off=False, value_on=True)
STATE_ACTION = _f("binary", "state_action", "State action",
                  "State actions will also be published as 'action' when true (default false).", ACCESS_SET,
                  value_off=False, value_on=True)
_CALIBRATION = "Calibrates the {} value (absolute offset), takes into effect on next report of device."
_PRECISION = ("Number of digits after decimal point for {}, takes into effect on next report of device. This option "
              "can only decrease the precision, not increase it.")


@dataclass(frozen=True, slots=True)
class Model:
    """A device model: its bridge/devices definition, the Zigbee fields of its entry, its first reported state."""

    definition: dict[str, Any]
    zigbee: dict[str, Any]  # type, power_source, model_id, manufacturer, endpoints, ...
    state: dict[str, Any]  # what zigbee2mqtt has cached once the device reported (linkquality is added per device)

    @property
    def model(self) -> str:
        """zigbee2mqtt's model name (the definition's `model`)."""
        return str(self.definition["model"])

    def features(self) -> Iterator[tuple[Expose, str | None]]:
        """Each feature whose property is a key of the state, with the type of the expose holding it (`light`,
        `switch`, `cover`, `climate`, or None for a generic one); a composite (`color`) is one feature."""
        for expose in self.definition["exposes"]:
            if "property" in expose:
                yield expose, None
            else:
                for feature in expose["features"]:
                    yield feature, expose["type"]

    def feature(self, prop: str) -> tuple[Expose, str | None] | None:
        """The first feature with this property (a colour light has two `color` composites: x/y first)."""
        return next(((f, kind) for f, kind in self.features() if f["property"] == prop), None)

    def fresh_state(self) -> dict[str, Any]:
        """A copy of the state a freshly paired device reports."""
        return copy.deepcopy(self.state)


MCCGQ11LM = Model(
    definition={
        "description": "Door and window sensor", "model": "MCCGQ11LM", "supports_ota": False, "vendor": "Aqara",
        "exposes": [
            BATTERY,
            _f("binary", "contact", "Contact", "Indicates if the contact is closed (= true) or open (= false)",
               value_off=True, value_on=False),
            DEVICE_TEMPERATURE, VOLTAGE,
            _f("numeric", "power_outage_count", "Power outage count", "Number of power outages",
               category="diagnostic"),
            _f("numeric", "trigger_count", "Trigger count",
               "Indicates how many times the sensor was triggered (since last scheduled report)",
               category="diagnostic"),
            LINKQUALITY],
        "options": [_f("numeric", "device_temperature_calibration", "Device temperature calibration",
                       _CALIBRATION.format("device_temperature"), ACCESS_SET)]},
    zigbee={"type": "EndDevice", "power_source": "Battery", "model_id": "lumi.sensor_magnet.aq2",
            "manufacturer": "LUMI", "date_code": "20161128", "software_build_id": "3000-0001",
            "endpoints": _endpoints({"1": (["genBasic", "genIdentify", "65535", "genOnOff"],
                                           ["genBasic", "genGroups", "65535"])})},
    state={"battery": 100, "contact": True, "device_temperature": 24, "power_outage_count": 5, "trigger_count": 0,
           "voltage": 3035})

WSDCGQ11LM = Model(
    definition={
        "description": "Temperature and humidity sensor", "model": "WSDCGQ11LM", "source": "native",
        "supports_ota": False, "vendor": "Aqara", "version": "0.0.0",
        "exposes": [
            BATTERY,
            _f("numeric", "temperature", "Temperature", "Measured temperature value", unit="°C"),
            _f("numeric", "humidity", "Humidity", "Measured relative humidity", unit="%"),
            _f("numeric", "pressure", "Pressure", "The measured atmospheric pressure", unit="hPa"),
            VOLTAGE, LINKQUALITY],
        "options": [
            option
            for quantity in ("temperature", "humidity", "pressure")
            for option in (
                _f("numeric", f"{quantity}_calibration", f"{quantity.capitalize()} calibration",
                   _CALIBRATION.format(quantity), ACCESS_SET, value_step=0.1),
                _f("numeric", f"{quantity}_precision", f"{quantity.capitalize()} precision",
                   _PRECISION.format(quantity), ACCESS_SET, value_max=3, value_min=0))]},
    zigbee={"type": "EndDevice", "power_source": "Battery", "model_id": "lumi.weather",
            "endpoints": _endpoints({"1": (["genBasic"], [])})},
    # The state a real one published (barbaris-in/smart-home docs/mqtt/mqtt-flow.md, zigbee2mqtt 1.33.2).
    state={"battery": 100, "humidity": 44.43, "power_outage_count": 1616, "pressure": 957.4, "temperature": 20.74,
           "voltage": 3025})

LED1545G12 = Model(
    definition={
        "description": "TRADFRI bulb E26/E27, white spectrum, globe, opal, 980 lm", "model": "LED1545G12",
        "source": "native", "supports_ota": True, "vendor": "IKEA", "version": "0.0.0",
        "exposes": [
            _light(250, 454, _group([
                _f("binary", "execute_if_off", "Execute if off", 'this setting can affect the "on_level", '
                   '"current_level_startup" or "brightness" setting', 7, value_off=False, value_on=True),
                _f("numeric", "current_level_startup", "Current level startup",
                   "Defines the desired startup level for a device when it is supplied with power", 7,
                   presets=[{"description": "Use minimum permitted value", "name": "minimum", "value": "minimum"},
                            {"description": "Use previous value", "name": "previous", "value": "previous"}],
                   value_max=254, value_min=1)],
                access=7, description="Configure genLevelCtrl", label="Level config", name="level_config",
                property="level_config", type="composite")),
            _f("enum", "effect", "Effect", "Triggers an effect on the light (e.g. make light blink for a few seconds)",
               ACCESS_SET, values=["blink", "breathe", "okay", "channel_change", "finish_effect", "stop_effect"]),
            POWER_ON_BEHAVIOR,
            _group([_f("binary", "execute_if_off", "Execute if off",
                       "Controls whether color and color temperature can be set while light is off", ACCESS_SET,
                       value_off=False, value_on=True)],
                   access=7, category="config", description="Advanced color behavior", label="Color options",
                   name="color_options", property="color_options", type="composite"),
            _f("enum", "identify", "Identify", "Initiate device identification", ACCESS_SET, category="config",
               values=["identify"]),
            LINKQUALITY],
        "options": [
            TRANSITION,
            _f("binary", "unfreeze_support", "Unfreeze support", "Whether to unfreeze IKEA lights (that are known to "
               "be frozen) before issuing a command, false: no unfreeze support, true: unfreeze support (default "
               "true).", ACCESS_SET, value_off=False, value_on=True),
            COLOR_SYNC,
            _f("numeric", "identify_timeout", "Identify timeout", "Sets the duration of the identification procedure "
               "in seconds (i.e., how long the device would flash).The value ranges from 1 to 30 seconds (default: "
               "3).", ACCESS_SET, value_max=30, value_min=1),
            STATE_ACTION]},
    zigbee={"type": "Router", "power_source": "Mains (single phase)", "model_id": "TRADFRI bulb E27 WS opal 980lm",
            "endpoints": _endpoints({"1": (["genBasic", "genScenes", "genOnOff", "genLevelCtrl", "lightingColorCtrl"],
                                           ["genScenes", "genOta"])})},
    state={"brightness": 127, "color_mode": "color_temp", "color_temp": 454, "state": "ON"})

HUE_GO_7146060PH = Model(
    definition={
        "description": "Hue Go", "model": "7146060PH", "source": "native", "supports_ota": True, "vendor": "Philips",
        "version": "0.0.0",
        "exposes": [
            _light(150, 500,
                   _group([_f("numeric", "x", "X", None, 7), _f("numeric", "y", "Y", None, 7)],
                          access=7, description="Color of this light in the CIE 1931 color space (x/y)",
                          label="Color (X/Y)", name="color_xy", property="color", type="composite"),
                   _group([_f("numeric", "hue", "Hue", None, 7), _f("numeric", "saturation", "Saturation", None, 7)],
                          access=7, description="Color of this light expressed as hue/saturation",
                          label="Color (HS)", name="color_hs", property="color", type="composite")),
            POWER_ON_BEHAVIOR,
            _f("enum", "effect", "Effect", None, 3, values=[
                "blink", "breathe", "okay", "channel_change", "candle", "fireplace", "colorloop", "sunset", "sunrise",
                "sparkle", "opal", "glisten", "underwater", "cosmos", "sunbeam", "enchant", "none", "finish_effect",
                "stop_effect", "stop_hue_effect"]),
            _f("numeric", "effect_speed", "Effect speed",
               "Animation speed for the active effect (0=slowest, 1=fastest)", 3, value_max=1, value_min=0,
               value_step=0.01),
            _f("text", "effect_color", "Effect color", "Set the base color of the active effect without stopping it "
               '(hex e.g. #FF4400, or JSON {"x":0.6,"y":0.3})', ACCESS_SET),
            LINKQUALITY],
        "options": [
            _f("binary", "hue_native_control", "Hue native control", "Control this light using a Philips-specific "
               "protocol instead of standard Zigbee commands. When enabled, on/off, brightness, color, and color "
               "temperature are combined into single atomic commands. This is required to use the Effect color "
               "update mode. When disabled (default), standard Zigbee commands are used, which preserves the usual "
               "behavior, including simulating on/off transitions.", ACCESS_SET, value_off=False, value_on=True),
            _f("enum", "effect_color_mode", "Effect color mode", "Controls what happens when color is changed while "
               "an effect is active (requires Hue native control). 'stop' (default): color change stops the effect "
               "(Hue app behavior). 'update': color change re-sends the effect with the new color.", ACCESS_SET,
               values=["stop", "update"]),
            TRANSITION, STATE_ACTION, COLOR_SYNC]},
    zigbee={"type": "Router", "power_source": "Mains (single phase)", "model_id": "LLC020", "manufacturer": "Philips",
            "date_code": "2019.09", "software_build_id": "5.127.1.26581",
            "endpoints": _endpoints({"1": (["genBasic", "genScenes", "genOnOff", "genLevelCtrl", "lightingColorCtrl"],
                                           ["genScenes", "genOta"])})},
    state={"brightness": 254, "color": {"x": 0.4599, "y": 0.4106}, "color_mode": "color_temp", "color_temp": 370,
           "state": "OFF"})

MS_104BZ = Model(
    definition={
        "description": "Smart light switch module (2 gang)", "model": "MS-104BZ", "supports_ota": False,
        "vendor": "Moes",
        "exposes": [
            *(_group([_f("binary", f"state_{ep}", "State", "On/off state of the switch", 7, name="state", endpoint=ep,
                         value_off="OFF", value_on="ON", value_toggle="TOGGLE")], endpoint=ep, type="switch")
              for ep in ("l1", "l2")),
            {**POWER_ON_BEHAVIOR, "values": ["off", "previous", "on"]},
            LINKQUALITY],
        "options": [STATE_ACTION]},
    zigbee={"type": "Router", "power_source": "Mains (single phase)", "model_id": "TS011F",
            "manufacturer": "_TZ3000_pmz6mjyu", "date_code": "",
            "endpoints": _endpoints({
                "1": (["genBasic", "genIdentify", "genGroups", "genScenes", "genOnOff", "57344", "manuSpecificTuya_3"],
                      ["genOta", "genTime"]),
                "2": (["genIdentify", "genGroups", "genScenes", "genOnOff", "57344", "manuSpecificTuya_3"], []),
                "242": ([], ["greenPower"])})},
    state={"power_on_behavior": "previous", "state_l1": "OFF", "state_l2": "OFF"})

WXKG11LM = Model(
    definition={
        "description": "Wireless mini switch", "model": "WXKG11LM", "source": "native", "supports_ota": False,
        "vendor": "Aqara", "version": "0.0.0",
        "exposes": [
            BATTERY, VOLTAGE, DEVICE_TEMPERATURE,
            _f("numeric", "power_outage_count", "Power outage count", "Number of power outages (since last pairing)",
               category="diagnostic"),
            _f("enum", "action", "Action", "Triggered action (e.g. a button click)", category="diagnostic",
               values=["single", "double", "triple", "quadruple", "hold", "release"]),
            LINKQUALITY],
        "options": [_f("numeric", "device_temperature_calibration", "Device temperature calibration",
                       _CALIBRATION.format("device_temperature"), ACCESS_SET, value_step=0.1)]},
    zigbee={"type": "EndDevice", "power_source": "Battery", "model_id": "lumi.sensor_switch.aq2",
            "endpoints": _endpoints({"1": (["genBasic"], ["genBasic", "genOnOff", "genLevelCtrl", "genScenes"])})},
    state={"battery": 100, "device_temperature": 24, "power_outage_count": 3, "voltage": 3005})

MS_108ZR = Model(
    definition={
        "description": "Zigbee + RF curtain switch module", "model": "MS-108ZR", "supports_ota": True,
        "vendor": "Moes",
        "exposes": [
            _group([_f("enum", "state", "State", None, 3, values=["OPEN", "CLOSE", "STOP"]),
                    _f("numeric", "position", "Position", "Position of this cover", 7, unit="%", value_max=100,
                       value_min=0)], type="cover"),
            _f("numeric", "calibration_time", "Calibration time", None, 7, value_max=100, value_min=0),
            _f("enum", "moving", "Moving", None, values=["UP", "STOP", "DOWN"]),
            _f("binary", "motor_reversal", "Motor reversal", None, 7, value_off="OFF", value_on="ON"),
            LINKQUALITY],
        "options": [
            _f("binary", "invert_cover", "Invert cover", "Inverts the cover position, false: open=100,close=0, true: "
               "open=0,close=100 (default false).", ACCESS_SET, value_off=False, value_on=True),
            _f("binary", "cover_position_tilt_disable_report", "Cover position tilt disable report",
               "Do not publish set cover target position as a normal 'position' value (default false).", ACCESS_SET,
               value_off=False, value_on=True)]},
    zigbee={"type": "Router", "power_source": "Mains (single phase)", "model_id": "TS130F",
            "manufacturer": "_TZ3000_1dd0d5yi", "date_code": "",
            "endpoints": _endpoints({"1": (["genBasic", "genGroups", "genScenes", "closuresWindowCovering",
                                            "genOnOff"], ["genOta", "genTime"])})},
    state={"calibration_time": 30, "motor_reversal": "OFF", "moving": "STOP", "position": 100, "state": "OPEN"})

BTH_RA = Model(
    definition={
        "description": "Radiator thermostat II", "model": "BTH-RA", "source": "native", "vendor": "Bosch",
        "exposes": [
            _group([
                _f("numeric", "local_temperature", "Local temperature", "Temperature used by the heating algorithm. "
                   "This is the temperature measured on the device (by default) or the remote temperature (if set "
                   "within the last 30 min).", 5, unit="°C"),
                _f("numeric", "local_temperature_calibration", "Local temperature calibration",
                   "Offset to add/subtract to the local temperature", 7, unit="°C", value_max=5, value_min=-5,
                   value_step=0.1),
                _f("numeric", "occupied_heating_setpoint", "Occupied heating setpoint", "Temperature setpoint", 7,
                   unit="°C", value_max=30, value_min=5, value_step=0.5),
                _f("enum", "system_mode", "System mode", "Mode of this device", 7, values=["heat"]),
                _f("enum", "running_state", "Running state", "The current running state", 5, values=["idle", "heat"]),
                _f("numeric", "pi_heating_demand", "PI heating demand",
                   "Position of the valve (= demanded heat) where 0% is fully closed and 100% is fully open", 7,
                   unit="%", value_max=100, value_min=0)], type="climate"),
            _f("enum", "setpoint_change_source", "Setpoint change source", "Source of the current setpoint "
               "temperature", 5, category="diagnostic", values=["manual", "schedule", "externally"]),
            _f("enum", "operating_mode", "Operating mode", "Bosch-specific operating mode", 7, category="config",
               values=["schedule", "manual", "pause"]),
            _f("binary", "window_detection", "Window detection", "Activates the window open mode, where the "
               "thermostat disables any heating/cooling to prevent unnecessary energy consumption. Please keep in "
               "mind that the device itself does not detect any open windows!", 7, value_off="OFF", value_on="ON"),
            _f("binary", "boost_heating", "Activate boost heating", "Activate boost heating (opens TRV for 5 "
               "minutes)", 7, value_off="OFF", value_on="ON"),
            _f("numeric", "remote_temperature", "Remote temperature", "Input for remote temperature sensor. Required "
               "at least every 30 minutes to prevent fallback to the internal sensor!", 7, category="config",
               unit="°C", value_max=35, value_min=0, value_step=0.2),
            _f("binary", "child_lock", "Child lock", "Enables/disables physical input on the thermostat", 7,
               value_off="UNLOCK", value_on="LOCK"),
            _f("numeric", "display_brightness", "Display brightness", "Sets brightness of the display", 7,
               category="config", unit="%", value_max=100, value_min=0, value_step=10),
            _f("numeric", "display_switch_on_duration", "Display switch-on duration",
               "Sets the time before the display is automatically switched off", 7, category="config", unit="s",
               value_max=30, value_min=5),
            _f("enum", "display_orientation", "Display orientation", "You can rotate the display content by 180° "
               "here. This is recommended if your thermostat is fitted vertically, for instance.", 7,
               category="config", values=["standard_arrangement", "rotated_by_180_degrees"]),
            _f("enum", "displayed_temperature", "Displayed temperature",
               "Select which temperature should be displayed on your radiator thermostat display", 7,
               category="config", values=["set_temperature", "measured_temperature"]),
            _f("enum", "valve_adapt_status", "Valve adaptation status", "Specifies the current status of the valve "
               "adaptation", 5, category="diagnostic",
               values=["none", "ready_to_calibrate", "calibration_in_progress", "error", "success"]),
            _f("binary", "automatic_valve_adapt", "Automatic valve adaptation requested", "Specifies if an automatic "
               "valve adaptation is being requested by the thermostat (for example after a successful firmware "
               "upgrade). If this is the case, the valve adaptation will be automatically started as soon as the "
               "adaptation status is 'ready_to_calibrate' or 'error'.", 5, category="diagnostic", value_off=False,
               value_on=True),
            _f("enum", "valve_adapt_process", "Trigger adaptation process", "Trigger the valve adaptation process. "
               "Only possible when the adaptation status is 'ready_to_calibrate' or 'error'.", ACCESS_SET,
               category="config", values=["adapt"]),
            _f("text", "error_state", "Error state", "Indicates whether the device encounters any errors or not", 5,
               category="diagnostic"),
            {**BATTERY, "access": 5, "description": "Remaining battery in %"},
            _f("binary", "battery_low", "Battery low", "Empty battery indicator", category="diagnostic",
               value_off=False, value_on=True)],
        "options": []},
    zigbee={"type": "EndDevice", "power_source": "Battery", "model_id": "RBSH-TRV0-ZB-EU", "manufacturer": "BOSCH",
            "date_code": "20231122", "software_build_id": "3.05.09",
            "endpoints": _endpoints({"1": (["genBasic", "genPowerCfg", "genIdentify", "genPollCtrl", "hvacThermostat",
                                            "hvacUserInterfaceCfg"], ["genTime", "genOta"])})},
    state={"battery": 100, "battery_low": False, "child_lock": "UNLOCK", "local_temperature": 19.5,
           "occupied_heating_setpoint": 21, "operating_mode": "manual", "pi_heating_demand": 0,
           "running_state": "idle", "setpoint_change_source": "manual", "system_mode": "heat",
           "window_detection": "OFF"})

MODELS: dict[str, Model] = {m.model: m for m in (MCCGQ11LM, WSDCGQ11LM, LED1545G12, HUE_GO_7146060PH, MS_104BZ,
                                                  WXKG11LM, MS_108ZR, BTH_RA)}

__all__ = ["ACCESS_GET", "ACCESS_SET", "ACCESS_STATE", "BTH_RA", "HUE_GO_7146060PH", "LED1545G12", "MCCGQ11LM",
           "MODELS", "MS_104BZ", "MS_108ZR", "WSDCGQ11LM", "WXKG11LM", "Expose", "Model"]
