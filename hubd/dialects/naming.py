"""Names a voice can say, for devices that come with none worth saying (pure).

The platform hears a device by its displayName. A source's own name is kept (a zigbee2mqtt friendly_name the owner
gave, a discovery device's `name`), unless it is an identifier: an unrenamed zigbee2mqtt device is called by its
ieee address (`0x000b57fffec6a5c2`), rtl_433 calls a sensor `ID1234`, OpenMQTTGateway and Shelly use MACs and
serials. Spelled out, these are nonsense ("Zero x Zero Zero Zero b Fifty Seven..."), so such a device is named
after its model: the vendor and the model or description, cut to what a voice would say ("IKEA TRADFRI bulb",
"Aqara Temperature and humidity sensor"). `device_name` says which name it took and why (the status page shows
it); the registry adds a word (the room, or "Second") where two devices would get the same name. A part split off
a device is named after the device and the part, without saying the device's name twice (`part_name`).
Imports nothing of hubd but the spoken-name rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hubd.spoken import spoken

MAX_MODEL_WORDS = 4  # of a description: "TRADFRI LED bulb E27 806 lumen, dimmable" → "TRADFRI LED bulb"

_MAC = re.compile(r"(?:[0-9a-f]{2}[:\-_. ]?){5}[0-9a-f]{2}", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s_\-:./]+")
_ID_WORD = re.compile(r"0x[0-9a-f]+"  # an ieee address
                      r"|(?=[0-9a-f]*\d)[0-9a-f]{6,}"  # a hexadecimal serial or MAC with digits in it
                      r"|\d{4,}"  # a long number (rtl_433's ids)
                      r"|[a-z]{1,3}\d{3,}",  # letters and a number: ID1234
                      re.IGNORECASE)
# Words producers put in generated names that say nothing of the device: left alone, the model says more.
_NOT_A_NAME = frozenset({"id", "tasmota", "shelly", "esphome", "esp", "omg", "device", "node", "zigbee", "sensor",
                         "rtl", "ble"})


def sayable_part(name: str, identifiers: Iterable[str] = ()) -> str:
    """What of `name` a voice can say: its words without identifiers (`Acurite-Tower-1234` → "Acurite Tower");
    "" when nothing is left but words that say nothing of the device (`tasmota_A1B2C3`, `ID1234`)."""
    text = name.strip()
    if not text or _MAC.fullmatch(text):
        return ""
    folded = text.casefold()
    if any(folded == str(i).strip().casefold() for i in identifiers if str(i).strip()):
        return ""
    words = [w for w in _SEPARATORS.split(text) if w]
    kept = [w for w in words if not _ID_WORD.fullmatch(w)]
    if len(kept) == len(words):
        return text  # no identifier in it: the name as given ("Kitchen 2", "GarageDoor1")
    if all(w.casefold() in _NOT_A_NAME for w in kept) or not spoken(" ".join(kept)):
        return ""
    return " ".join(kept)


def model_name(vendor: str | None, model: str | None) -> str | None:
    """The vendor and model as a voice says them: the model (or description) up to its first comma and before the
    first word with a digit in it, at most MAX_MODEL_WORDS words, the vendor not said twice; None without either."""
    words: list[str] = []
    for word in (model or "").split(",")[0].split():
        if any(c.isdigit() for c in word) or not spoken(word):
            break
        words.append(word)
        if len(words) >= MAX_MODEL_WORDS:
            break
    brand = (vendor or "").strip()
    if brand and words and words[0].casefold() == brand.casefold():
        words = words[1:]
    text = " ".join([brand, *words] if brand else words).strip()
    return text if spoken(text) else None


def device_name(given: str | None, identifiers: Iterable[str], vendor: str | None, model: str | None,
                kind: str = "device") -> tuple[str, str]:
    """The name to give a device, and why hubd chose it ("" when it is the source's own name).

    `given`: the source's name (a friendly_name, a discovery `device.name`); `kind`: what the device is, for the
    last resort ("light", "sensor")."""
    ids = [str(i) for i in identifiers]
    sayable = sayable_part(given, ids) if given else ""
    if given and sayable == given and spoken(given):
        return given, ""
    if sayable and spoken(sayable):
        return sayable, f"its name {given!r} has an identifier in it, left out"
    by_model = model_name(vendor, model)
    what = f"its name {given!r} is an identifier" if given else "it has no name"
    if by_model is not None:
        return by_model, f"{what}, so it is named after its model"
    return kind.capitalize(), f"{what} and its model says nothing sayable, so it is named after what it is"


def part_name(device: str, part: str) -> str:
    """A split-off part's name: the device's and the part's, unless the part's already starts with the device's
    (producers that name each entity in full: "NodeMCU Relay 2", not "NodeMCU NodeMCU Relay 2")."""
    label = part.replace("_", " ").strip()
    if not label:
        return device
    if label.casefold().startswith(device.casefold()):
        return label
    return f"{device} {label}"
