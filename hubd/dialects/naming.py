"""Names a voice can say, for every producer (pure): the rules of CONTRACT section 6 in one place.

The platform hears a device by its displayName. A source's own name is kept (a zigbee2mqtt friendly_name the owner
gave, a discovery device's `name`), but producers fill names with what no owner says: identifiers (an unrenamed
zigbee2mqtt device is its ieee address `0x000b57fffec6a5c2`, rtl_433 calls a sensor `ID1234`, Shelly and
OpenMQTTGateway use MACs), programs (`rtl_433`, `OMG_community`, `tasmota`), sensor chips (`DS18B20`, `DHT11`) and
model codes (`H5075`, `rm230z`). Spelled out, these are nonsense ("rtl Four Hundred Thirty Three", "DS Eighteen B
Twenty"), so they are left out of a name (`sayable_part`):

- an identifier (a MAC, an ieee address, a hex serial, a long number, `ID1234`) or a token of letters and digits
  mixed (a model code `rm230z`, `AB34` of `H5075-AB34`, `1R`) is dropped; a word with a small number at its end is a
  name ("Bedroom2", "GarageDoor1": "Bedroom Two"), and so is a number of its own ("Lamp 2");
- a sensor chip (`DS18B20`, `DHT11`, `BME280`, `SHT3X`, `AM2301`, `SI7021`...) is dropped;
- a producer's program name (`rtl_433`, `OMG_community`, `Theengs`, `tasmota`, `esphome`...) is dropped;
- what is left is no name when it is only the manufacturer (`bosch_rm230z` → "bosch"), only words that say nothing
  of the device (`tasmota_A1B2C3`), or, where the model says more, a component and its number (`relay-0`).

A device whose name is left with nothing is named after its model (`model_name`): the model's (or description's)
words where they are words ("IKEA TRADFRI bulb"), else the manufacturer with the device's class ("Allterco switch",
"Acurite thermometer"), else its class alone ("Thermometer") when the manufacturer is a program. `device_name` says
which name it took and why (the status page and /api/devices show it); the registry adds a word (the room, or
"Second") where two devices would get the same name. A part split off a device is named after the device and the
part, without saying the device's name twice (`part_name`). Digits that remain are spelled by hubd.spoken.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hubd.spoken import spoken

MAX_MODEL_WORDS = 4  # of a description: "TRADFRI LED bulb E27 806 lumen, dimmable" → "TRADFRI LED bulb"

_MAC = re.compile(r"(?:[0-9a-f]{2}[:\-_. ]?){5}[0-9a-f]{2}", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s_\-:./\[\]\"',()]+")
# Producers' programs, never a name: rtl_433 and its discovery script, OpenMQTTGateway (OMG_community), Theengs,
# Tasmota, ESPHome, zigbee2mqtt, Shelly's scripts.
PROGRAMS = ("rtl_433", "OMG_community", "OpenMQTTGateway", "Theengs Gateway", "Theengs", "tasmota", "esphome",
            "zigbee2mqtt", "shelly-scripts")
_PROGRAM = re.compile(r"(?<![^\W_])(?:rtl[\s_-]?433|omg[\s_-]?community|openmqttgateway|theengs(?:[\s_-]?gateway)?"
                      r"|tasmota|esphome|zigbee2mqtt|shelly[\s_-]?scripts?)(?![^\W_])", re.IGNORECASE)
_ID_WORD = re.compile(r"0x[0-9a-f]+"  # an ieee address
                      r"|(?=[0-9a-f]*\d)[0-9a-f]{6,}"  # a hexadecimal serial or MAC with digits in it
                      r"|\d{4,}"  # a long number (rtl_433's ids)
                      r"|[a-z]{1,3}\d{3,}"  # letters and a number: ID1234
                      r"|shelly[a-z0-9]*",  # a Shelly's id before its MAC (shellyplus1pm-a8032ab12345)
                      re.IGNORECASE)
# Sensor and radio chips producers put in names (Tasmota's sensor names, OpenMQTTGateway's models).
_CHIP = re.compile(r"DS18[BS]20|DS18x20|DHT\d\d|AM23\d\d|BME\d{3}|BMP\d{3}|SHT\d[\dX]|SHT[34]X|SI70\d\d|HTU2\dD?"
                   r"|SCD[34]\d|CCS811|SGP\d\d|BH1750|TSL2561|VEML\d{4}|HDC1080|LM75A?|MAX318\d\d|INA2\d\d"
                   r"|ADS1115|PMS\d{4}|ESP32\w*|ESP8266\w*|CC1101|SX127\d|NRF24\w*", re.IGNORECASE)
_WORD_AND_NUMBER = re.compile(r"[^\W\d_]{3,}\d{1,3}")  # "Bedroom2", "GarageDoor1": a name with its number
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)", re.IGNORECASE)
# Words producers put in generated names that say nothing of the device: left alone, the model says more.
_NOT_A_NAME = frozenset({"id", "tasmota", "shelly", "esphome", "esp", "omg", "device", "node", "zigbee", "sensor",
                         "rtl", "ble"})
# A device's components as producers number them ("relay-0", "input-1"): no name where the model says more.
_COMPONENTS = frozenset({"relay", "input", "output", "switch", "channel", "button", "light", "sensor", "temperature",
                         "humidity"})
# What a device is, as a voice says it (its displayType, or "sensor"/"thermometer" for one that only reports).
_CLASS_WORDS = {"socket": "plug", "curtain": "cover", "ac": "air conditioner", "door": "lock",
                "waterHeater": "water heater", "cleanBot": "vacuum", "unknown": "sensor"}


def _cjk(word: str) -> bool:
    return any(ord(ch) >= 0x1100 and ch.isalpha() for ch in word)


def unsayable(word: str) -> bool:
    """Whether a word of a name is an identifier, a chip or a model code (left out, never spelled out)."""
    if _ID_WORD.fullmatch(word) or _CHIP.fullmatch(word):
        return True
    if not any(c.isdigit() for c in word) or _cjk(word) or _ORDINAL.fullmatch(word):
        return False
    if word.isdigit():
        return False  # a number of its own: "Lamp 2" (long ones are identifiers, above)
    return not _WORD_AND_NUMBER.fullmatch(word)  # letters and digits mixed: a model code (rm230z, H5075, 1R, AB34)


def sayable_part(name: str, identifiers: Iterable[str] = (), vendor: str | None = None,
                 has_model: bool = False) -> str:
    """What of `name` a voice can say: its words without identifiers, chips, programs and model codes
    (`Acurite-Tower-1234` → "Acurite Tower", `Wetterstation DS18B20 Temperature` → "Wetterstation Temperature");
    "" when nothing is left but words that say nothing of the device (`tasmota_A1B2C3`, `ID1234`), the manufacturer
    alone (`bosch_rm230z` with vendor Bosch), or (`has_model`: a model can name it) a component's number (`relay-0`)."""
    text = name.strip()
    if not text or _MAC.fullmatch(text):
        return ""
    folded = text.casefold()
    if any(folded == str(i).strip().casefold() for i in identifiers if str(i).strip()):
        return ""
    without_programs = _PROGRAM.sub(" ", text)
    words = [w for w in _SEPARATORS.split(without_programs) if w]
    kept = [w for w in words if not unsayable(w)]
    if without_programs == text and len(kept) == len(words):
        return text  # nothing to leave out: the name as given ("Kitchen 2", "GarageDoor1")
    brand = {w.casefold() for w in _SEPARATORS.split(vendor or "") if w}
    if all(w.casefold() in _NOT_A_NAME for w in kept) or not spoken(" ".join(kept)):
        return ""
    if brand and all(w.casefold() in brand or w.casefold() in _NOT_A_NAME for w in kept):
        return ""  # the manufacturer alone
    if has_model and all(w.casefold() in _COMPONENTS or w.isdigit() for w in kept):
        return ""  # "relay 0": the component's number, not the owner's words
    return " ".join(kept)


def is_program(text: str | None) -> bool:
    """Whether `text` is a producer's program name (`rtl_433`, `OMG_community`), never a manufacturer."""
    return bool(text) and _PROGRAM.fullmatch(str(text).strip()) is not None


def class_word(kind: str) -> str:
    """What a device of this kind (its displayType, "sensor", "thermometer") is, as a voice says it."""
    return _CLASS_WORDS.get(kind, kind)


def model_name(vendor: str | None, model: str | None, kind: str | None = None) -> str | None:
    """The vendor and model as a voice says them: the model (or description) up to its first comma and before the
    first word with a digit in it, at most MAX_MODEL_WORDS words, the vendor not said twice; where the model
    has no such words, the vendor with the device's class (`kind`: "Allterco switch"); a program is no vendor.
    None without anything sayable."""
    words: list[str] = []
    for word in (model or "").split(",")[0].split():
        if any(c.isdigit() for c in word) or is_program(word) or not spoken(word):
            break  # a model number or code ("986", "E26/E27", "PlusI4"): the words before it name the model
        words.append(word)
        if len(words) >= MAX_MODEL_WORDS:
            break
    brand = "" if is_program(vendor) else (vendor or "").strip()
    if brand and words and words[0].casefold() == brand.casefold():
        words = words[1:]
    if not words and kind is not None and kind != "device" and (brand or (model or "").strip()):
        words = [class_word(kind)]  # a manufacturer alone is never a name
    text = " ".join([brand, *words] if brand else words).strip()
    text = text[:1].upper() + text[1:]
    return text if spoken(text) else None


def device_name(given: str | None, identifiers: Iterable[str], vendor: str | None, model: str | None,
                kind: str = "device") -> tuple[str, str]:
    """The name to give a device, and why hubd chose it ("" when it is the source's own name).

    `given`: the source's name (a friendly_name, a discovery `device.name`); `kind`: what the device is, for a
    manufacturer without model words and for the last resort ("light", "thermometer")."""
    ids = [str(i) for i in identifiers]
    by_model = model_name(vendor, model, kind)
    sayable = sayable_part(given, ids, vendor, by_model is not None) if given else ""
    if given and sayable == given and spoken(given):
        return given, ""
    if sayable and spoken(sayable):
        return sayable, f"its name {given!r} has an identifier, a chip or a program's name in it, left out"
    what = f"its name {given!r} is an identifier, a model code or its manufacturer" if given else "it has no name"
    if by_model is not None:
        return by_model, f"{what}, so it is named after its model"
    return class_word(kind).capitalize(), \
        f"{what} and its model says nothing sayable, so it is named after what it is"


def part_name(device: str, part: str) -> str:
    """A split-off part's name: the device's and the part's, unless the part's already starts with the device's
    (producers that name each entity in full: "NodeMCU Relay 2", not "NodeMCU NodeMCU Relay 2"); what the part's
    name has of identifiers, chips and programs is left out as from any name (Theengs' `BM_V23-tempf`: "tempf")."""
    label = sayable_part(part.replace("_", " "))
    if not label:
        return device
    if label.casefold().startswith(device.casefold()):
        return label
    return f"{device} {label}"
