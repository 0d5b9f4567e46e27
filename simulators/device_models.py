"""The simulated device kinds except the speaker (simulators.speaker): sensors, actuators, a doorbell.

Pure behaviour on top of simulators.sim_device (docs/devices.md): capabilities, realistic random
changes, hold times and curtain travel. Must not import hubd nor paho.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Unpack

from simulators.sim_device import (
    COLOR_MAX,
    PHYSICAL_INTERACTION,
    CommonOptions,
    DoorbellPressed,
    Happening,
    InterfaceSpec,
    SimDevice,
    StateReport,
    as_float,
)

CURTAIN_REPORT_INTERVAL_S = 1.0
# MotionSwitch On at the end it is heading for (or on a curtain without travel time): the motor still
# runs this long into its end stop, so the start is reported (MotionSwitch On), then the stop.
END_STOP_RUN_S = 0.5


class ClimateSensor(SimDevice):
    """A temperature and humidity sensor that drifts in a random walk."""

    kind = "climate"
    label = "Climate Sensor"

    def __init__(self, endpoint_id: str, *, temperature: float = 21.5, humidity: int = 45,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(
            endpoint_id,
            interfaces=(
                InterfaceSpec("Temperature", (), low=-40.0, high=85.0, step=0.5, integer=False),
                InterfaceSpec("Humidity", ()),
            ),
            initial={"Temperature": temperature, "Humidity": humidity},
            **common,
        )
        self._baseline = (temperature, humidity)

    def random_step(self, now: float) -> Happening | None:
        """Move temperature by 0.1..0.5 °C and humidity by a little, both pulled back toward the start."""
        temp = as_float(self._values["Temperature"])
        hum = as_float(self._values["Humidity"])
        pull = 1.0 if temp < self._baseline[0] else -1.0
        step = self.rng.uniform(0.1, 0.5) * (pull if self.rng.random() < 0.6 else -pull)
        self._values["Temperature"] = round(min(max(temp + step, 5.0), 35.0), 1)
        hum_step = self.rng.choice((-2, -1, 0, 0, 1, 2)) + (1 if hum < self._baseline[1] - 10 else 0)
        self._values["Humidity"] = int(min(max(hum + hum_step, 20), 90))
        return StateReport(self.state())


class _BinarySensor(SimDevice):
    """A read-only Switch (On/Off) reported with a physical cause."""

    def __init__(self, endpoint_id: str, *, initial: str, **common: Unpack[CommonOptions]) -> None:
        super().__init__(endpoint_id, interfaces=(InterfaceSpec("Switch", (), enum_values=("On", "Off")),),
                         initial={"Switch": initial}, **common)

    def _report(self) -> StateReport:
        return StateReport({"Switch": self._values["Switch"]}, cause=PHYSICAL_INTERACTION, list_form=True)


class ContactSensor(_BinarySensor):
    """A door or window contact: Switch On = open, Off = closed (docs/devices.md)."""

    kind = "contact"
    label = "Door Sensor"

    def __init__(self, endpoint_id: str, *, change_probability: float = 0.05,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(endpoint_id, initial="Off", **common)
        self.change_probability = change_probability

    def random_step(self, now: float) -> Happening | None:
        """Now and then someone opens or closes it."""
        if self.rng.random() >= self.change_probability:
            return None
        self._values["Switch"] = "Off" if self._values["Switch"] == "On" else "On"
        return self._report()


class MotionSensor(_BinarySensor):
    """A motion sensor: Switch On when motion is seen, back to Off after hold_s without motion."""

    kind = "motion"
    label = "Motion Sensor"

    def __init__(self, endpoint_id: str, *, hold_s: float = 30.0, trigger_probability: float = 0.1,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(endpoint_id, initial="Off", **common)
        self.hold_s = hold_s
        self.trigger_probability = trigger_probability
        self._clear_at: float | None = None

    def detect(self, now: float) -> Happening | None:
        """Motion seen now: On (and a report) if it was Off; otherwise the hold time restarts."""
        self._clear_at = now + self.hold_s
        if self._values["Switch"] == "On":
            return None
        self._values["Switch"] = "On"
        return self._report()

    def random_step(self, now: float) -> Happening | None:
        """Now and then someone walks by."""
        if self.rng.random() >= self.trigger_probability:
            return None
        return self.detect(now)

    def absorb(self, states: Mapping[str, object], now: float) -> None:
        """An On published from outside starts the hold time too."""
        super().absorb(states, now)
        self._clear_at = now + self.hold_s if self._values["Switch"] == "On" else None

    def next_deadline(self, now: float) -> float | None:
        """The end of the hold time while On."""
        return self._clear_at

    def advance(self, now: float) -> Happening | None:
        """Off once the hold time has passed."""
        if self._clear_at is None or now < self._clear_at:
            return None
        self._clear_at = None
        self._values["Switch"] = "Off"
        return self._report()


class Light(SimDevice):
    """A colour light with brightness and colour temperature; now and then its wall switch is used."""

    kind = "light"
    label = "Light"
    display_type = "light"

    def __init__(self, endpoint_id: str, *, toggle_probability: float = 0.02,
                 **common: Unpack[CommonOptions]) -> None:
        percent_ops = ("Set", "Adjust", "SetMax", "SetMin")
        super().__init__(
            endpoint_id,
            interfaces=(
                InterfaceSpec("Switch", ("On", "Off"), enum_values=("On", "Off")),
                InterfaceSpec("Brightness", percent_ops),
                InterfaceSpec("Color", ("Set", "SetRandom"), high=COLOR_MAX),
                InterfaceSpec("ColorTemperature", percent_ops),
            ),
            initial={"Switch": "Off", "Brightness": 80, "Color": 0xFFFFFF, "ColorTemperature": 50},
            **common,
        )
        self.toggle_probability = toggle_probability

    def random_step(self, now: float) -> Happening | None:
        """Someone flips the wall switch."""
        if self.rng.random() >= self.toggle_probability:
            return None
        self._values["Switch"] = "Off" if self._values["Switch"] == "On" else "On"
        return StateReport({"Switch": self._values["Switch"]}, cause=PHYSICAL_INTERACTION, list_form=True)


@dataclass(frozen=True, slots=True)
class _Move:
    start: float
    target: int
    started_at: float
    run_s: float = 0.0  # how long the motor runs at least


class Curtain(SimDevice):
    """A curtain: Position 0..100 (0 closed), Switch On/Off opens/closes fully, MotionSwitch Off stops.

    With travel_s > 0 a full stroke takes that long; MotionSwitch is On while it moves and Position is
    reported every second on the way. MotionSwitch On where there is nowhere to go runs the motor into
    its end stop for END_STOP_RUN_S: MotionSwitch On, then Off.
    """

    kind = "curtain"
    label = "Curtain"
    display_type = "curtain"

    def __init__(self, endpoint_id: str, *, travel_s: float = 0.0, position: int = 0,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(
            endpoint_id,
            interfaces=(
                InterfaceSpec("Position", ("Set", "Adjust")),
                InterfaceSpec("MotionSwitch", ("On", "Off"), enum_values=("On", "Off")),
                InterfaceSpec("Switch", ("On", "Off"), enum_values=("On", "Off")),
            ),
            initial={"Position": position, "MotionSwitch": "Off", "Switch": "On" if position > 0 else "Off"},
            **common,
        )
        self.travel_s = travel_s
        self._move: _Move | None = None

    def next_deadline(self, now: float) -> float | None:
        """Every report interval while moving, and the moment it arrives."""
        if self._move is None:
            return None
        return min(now + CURTAIN_REPORT_INTERVAL_S, self._arrival(self._move))

    def advance(self, now: float) -> Happening | None:
        """Move along; stop at the target."""
        if self._move is None:
            return None
        before = self.state()
        if now >= self._arrival(self._move):
            self._finish(self._move.target)
        else:
            self._values["Position"] = round(self._position_at(now))
        return StateReport(self.state()) if self.state() != before else None

    def _assign(self, name: str, value: object, now: float) -> None:
        if name == "Position":
            self._move_to(round(as_float(value)), now)
        elif name == "Switch":
            self._move_to(100 if value == "On" else 0, now)
        elif value == "Off":  # MotionSwitch Off: stop where it is
            self._finish(round(self._position_at(now)))
        else:  # MotionSwitch On: carry on toward where Switch points
            self._move_to(100 if self._values["Switch"] == "On" else 0, now, motor=True)

    def _move_to(self, target: int, now: float, *, motor: bool = False) -> None:
        current = self._position_at(now)
        self._values["Switch"] = "On" if target > 0 else "Off"
        if self.travel_s <= 0 or round(current) == target:
            if not motor:
                self._finish(target)
                return
            self._values["Position"] = target
            self._move = _Move(start=target, target=target, started_at=now, run_s=END_STOP_RUN_S)
            self._values["MotionSwitch"] = "On"
            return
        self._values["Position"] = round(current)
        self._move = _Move(start=current, target=target, started_at=now)
        self._values["MotionSwitch"] = "On"

    def _finish(self, position: int) -> None:
        self._move = None
        self._values["Position"] = position
        self._values["MotionSwitch"] = "Off"

    def _position_at(self, now: float) -> float:
        move = self._move
        if move is None:
            return as_float(self._values["Position"])
        if self.travel_s <= 0:
            return move.target
        travelled = (now - move.started_at) * 100.0 / self.travel_s
        distance = move.target - move.start
        return move.target if travelled >= abs(distance) else move.start + math.copysign(travelled, distance)

    def _arrival(self, move: _Move) -> float:
        return move.started_at + max(move.run_s, abs(move.target - move.start) * self.travel_s / 100.0)


class AirConditioner(SimDevice):
    """An air conditioner: power, mode, set-point (limits in additionalInfo) and fan speed."""

    kind = "ac"
    label = "Air Conditioner"
    display_type = "ac"

    def __init__(self, endpoint_id: str, *, min_temperature: int = 16, max_temperature: int = 30,
                 **common: Unpack[CommonOptions]) -> None:
        number_ops = ("Set", "Adjust", "SetMax", "SetMin")
        modes = ("Auto", "Cool", "Heat", "Dry", "Fan")
        super().__init__(
            endpoint_id,
            interfaces=(
                InterfaceSpec("Switch", ("On", "Off"), enum_values=("On", "Off")),
                InterfaceSpec("Mode", modes, enum_values=modes),
                InterfaceSpec("Temperature", number_ops, low=min_temperature, high=max_temperature, step=1.0,
                              integer=False),
                InterfaceSpec("FanSpeed", (*number_ops, "SetHigh", "SetMedium", "SetLow"),
                              presets=(("SetHigh", 100.0), ("SetMedium", 60.0), ("SetLow", 30.0))),
            ),
            initial={"Switch": "Off", "Mode": "Auto", "FanSpeed": 60,
                     "Temperature": min(max(24, min_temperature), max_temperature)},
            additional_info={"minTemperature": str(min_temperature), "maxTemperature": str(max_temperature)},
            **common,
        )


class Doorbell(SimDevice):
    """A doorbell: no capabilities, a DoorbellPress event per press; presses on its own if press_every_s."""

    kind = "doorbell"
    label = "Doorbell"

    def __init__(self, endpoint_id: str, *, press_every_s: float | None = None,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(endpoint_id, interfaces=(), initial={}, **common)
        self.press_every_s = press_every_s
        self._next_press: float | None = None

    def press(self) -> DoorbellPressed:
        """A press, to publish."""
        return DoorbellPressed()

    def next_deadline(self, now: float) -> float | None:
        """The next random press (exponentially spaced, press_every_s apart on average)."""
        if not self.press_every_s:
            return None
        if self._next_press is None:
            self._next_press = now + self.rng.expovariate(1.0 / self.press_every_s)
        return self._next_press

    def advance(self, now: float) -> Happening | None:
        """Press when the random press is due."""
        if self._next_press is None or now < self._next_press:
            return None
        self._next_press = None
        return self.press()
