"""What the platform accepts from a device, the pure part: bring a config or a
state into that shape, or say why it cannot be.

The platform refuses a whole batched AddOrUpdateReport for one bad endpoint, and then every ChangeReport
of the endpoints it never learnt: so nothing it would refuse may reach the outbox. Names lose digits
(spelt as words: Chinese ones in a name with Chinese, Japanese or Korean letters, else English) and
punctuation; interfaces and operations must be the platform's (the table of `hubd.control`); state values
must fit their interface (enum values matched without regard to case, numbers in range). No I/O, no
state; imports only hubd.control, hubd.errors and hubd.mqtt.codec.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from hubd.control import COLOR_MAX, INTERFACES, Interface, Kind
from hubd.errors import DeviceMessageInvalid
from hubd.mqtt.codec import Capability, DeviceConfig, StateValue

_BY_LOWER = {name.lower(): name for name in INTERFACES}
_NUMBER_RE = re.compile(r"(\d+)(?:\.(\d+))?(?:(st|nd|rd|th)\b)?", re.IGNORECASE)
_APOSTROPHES = frozenset("'’ʼ`´")
_ONES = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten", "Eleven", "Twelve",
         "Thirteen", "Fourteen", "Fifteen", "Sixteen", "Seventeen", "Eighteen", "Nineteen")
_TENS = ("", "", "Twenty", "Thirty", "Forty", "Fifty", "Sixty", "Seventy", "Eighty", "Ninety")
_SCALES = ((10**9, "Billion"), (10**6, "Million"), (1000, "Thousand"))
_ORDINALS = {"One": "First", "Two": "Second", "Three": "Third", "Five": "Fifth", "Eight": "Eighth", "Nine": "Ninth",
             "Twelve": "Twelfth"}
_CN_DIGITS = "零一二三四五六七八九"
_CN_SMALL = ((1000, "千"), (100, "百"), (10, "十"), (1, ""))
_CN_LARGE = ((10**8, "亿"), (10**4, "万"), (1, ""))
# Scripts whose names get Chinese numbers: Han (and its compatibility forms), kana, Hangul.
_CJK_RANGES = ((0x1100, 0x11FF), (0x3040, 0x30FF), (0x3130, 0x318F), (0x31F0, 0x31FF), (0x3400, 0x4DBF),
               (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0x20000, 0x323AF))
# Numerals that are Han letters, kept as they are: 〇 (IDEOGRAPHIC NUMBER ZERO), 〡 (HANGZHOU NUMERAL ONE).
_HAN_NUMERALS = ("IDEOGRAPHIC NUMBER", "HANGZHOU NUMERAL")


@dataclass(frozen=True, slots=True)
class Renamed:
    """A name changed so the platform accepts it (logged once per config)."""

    field: str
    old: str
    new: str | None  # None: nothing speakable was left, the optional field is left out


def spoken(text: str) -> str:
    """`text` as the platform takes a displayName or room: numbers as words, no punctuation.

    "Lamp 2" -> "Lamp Two", "Bedroom2" -> "Bedroom Two", "2nd Floor" -> "Second Floor", "Lamp Ⅱ" -> "Lamp Two",
    "Hall (Upstairs)" -> "Hall Upstairs", "Anna's Lamp" -> "Annas Lamp". With Chinese, Japanese or Korean
    letters in it, numbers are Chinese and join their neighbours: "卧室2" -> "卧室二", "Ⅱ号灯" -> "二号灯",
    "1.5楼" -> "一点五楼". Letters of every script are kept, and the marks on them (accents), but not a
    mark whose base is gone ("❤️ Lamp" -> "Lamp"); may return "".
    """
    chinese = any(_is_cjk(ch) for ch in text)
    out: list[str] = []
    position = 0
    for match in _NUMBER_RE.finditer(text):
        _letters(text[position:match.start()], chinese, out)
        out.append(_chinese_number_words(match) if chinese else f" {_number_words(match)} ")
        position = match.end()
    _letters(text[position:], chinese, out)
    return " ".join("".join(out).split())


def conform_config(config: DeviceConfig) -> tuple[DeviceConfig, list[Renamed]]:
    """The config with spoken names and canonical interface names, and what was renamed.

    Raises DeviceMessageInvalid for an interface or operation the platform does not know (the whole config
    is refused: a device must not half-appear) and for a displayName with nothing speakable in it.
    """
    renamed: list[Renamed] = []
    display = spoken(config.displayName)
    if not display:
        raise DeviceMessageInvalid(f"displayName: {config.displayName!r} has nothing the platform can speak "
                                   "(it refuses digits and punctuation); use words, e.g. \"Desk Lamp\"")
    if display != config.displayName:
        renamed.append(Renamed("displayName", config.displayName, display))
    room = config.recommendRoomName
    if config.recommendRoomName is not None:
        room = spoken(config.recommendRoomName) or None
        if room != config.recommendRoomName:
            renamed.append(Renamed("recommendRoomName", config.recommendRoomName, room))
    capabilities = tuple(_capability(c) for c in config.capabilities)
    names = [c.interface for c in capabilities]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DeviceMessageInvalid(f"capabilities list an interface twice: {twice}")
    if not renamed and capabilities == config.capabilities:
        return config, []
    return replace(config, displayName=display, recommendRoomName=room, capabilities=capabilities), renamed


def interface_name(name: str, brand: str = "Service") -> str:
    """The platform's spelling of an interface name ("switch" -> "Switch", "Service.Switch" -> "Switch", as in
    configs); unknown names unchanged."""
    if name in INTERFACES:
        return name
    known = _BY_LOWER.get(name.lower())
    if known is not None:
        return known
    bare = name
    for prefix in (f"{brand}.", "Service."):
        bare = bare.removeprefix(prefix)
    return _BY_LOWER.get(bare.lower(), name)


def conform_value(interface_name: str, value: StateValue) -> StateValue:
    """A state value as the platform takes it for this interface; DeviceMessageInvalid says why not.

    Enum values are matched without regard to case and sent in the platform's spelling ("on" -> "On");
    numbers must be in the interface's range (Color a whole number); descriptors are objects of strings.
    """
    interface = INTERFACES.get(interface_name)
    if interface is None:
        raise DeviceMessageInvalid(f"{interface_name}: not an interface the platform knows; use one of "
                                   f"{', '.join(sorted(INTERFACES))}")
    if interface.kind is Kind.ENUM:
        return _enum_value(interface, value)
    if interface.kind is Kind.NUMBER:
        return _number_value(interface, value)
    return _descriptor_value(interface, value)


def _capability(cap: Capability) -> Capability:
    name = interface_name(cap.interface)
    interface = INTERFACES.get(name)
    if interface is None:
        raise DeviceMessageInvalid(f"capabilities: interface {cap.interface!r} is not one the platform knows; "
                                   f"use one of {', '.join(sorted(INTERFACES))}")
    operations = tuple(_operation(interface, op) for op in cap.supportedOperations)
    if name == cap.interface and operations == cap.supportedOperations:
        return cap
    return Capability.of(name, tuple(dict.fromkeys(operations)), cap.proactivelyReported, cap.retrievable)


def _operation(interface: Interface, operation: str) -> str:
    if operation in interface.operations:
        return operation
    for known in interface.operations:
        if known.lower() == operation.lower():
            return known
    raise DeviceMessageInvalid(f"capabilities: {interface.name} has no operation {operation!r}; it has "
                               f"{', '.join(sorted(interface.operations))} (or [] for a read-only sensor)")


def _enum_value(interface: Interface, value: StateValue) -> str:
    if isinstance(value, str):
        if value in interface.operations:
            return value  # the usual case, on every state message: already the platform's spelling
        wanted = value.strip().lower()
        for known in interface.operations:
            if known.lower() == wanted:
                return known
    raise DeviceMessageInvalid(f"{interface.name}: {_show(value)} is not a {interface.name} value; "
                               f"use one of {', '.join(sorted(interface.operations))}")


def _number_value(interface: Interface, value: StateValue) -> int | float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise DeviceMessageInvalid(f"{interface.name}: must be a number (e.g. {_example(interface)}), "
                                   f"got {_show(value)}")
    low, high = interface.value_range or (-math.inf, math.inf)
    if not low <= value <= high:
        raise DeviceMessageInvalid(f"{interface.name}: {value!r} is outside its range {low:g} to {high:g}")
    if interface.whole_only:  # RGB is a decimal integer; 21.5 °C and 40.5 % are fine
        if not float(value).is_integer():
            raise DeviceMessageInvalid(f"{interface.name}: must be a whole number (RGB 0 to {COLOR_MAX}), "
                                       f"got {value!r}")
        return int(value)
    return value


def _descriptor_value(interface: Interface, value: StateValue) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeviceMessageInvalid(f"{interface.name}: must be an object with {_keys(interface)}, got {_show(value)}")
    unknown = sorted(set(value) - interface.descriptor_keys)
    if unknown:
        raise DeviceMessageInvalid(f"{interface.name}: unknown keys {unknown}; it takes {_keys(interface)}")
    bad = sorted(k for k, v in value.items() if not isinstance(v, str))
    if bad:
        raise DeviceMessageInvalid(f"{interface.name}: {bad} must be strings")
    return value


def _keys(interface: Interface) -> str:
    return ", ".join(sorted(interface.descriptor_keys))


def _example(interface: Interface) -> str:
    return "21.5" if interface.value_range is None else f"{interface.value_range[1] / 2:g}"


def _show(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    return repr(value)[:60]


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def _letters(text: str, chinese: bool, out: list[str]) -> None:
    """Append `text` without digits (done before), punctuation and symbols; other numerals as words."""
    on_letter = False  # a mark (accent, variation selector, keycap) is kept only on a letter that was kept
    for ch in text:
        if ch in _APOSTROPHES:
            continue
        kind = unicodedata.category(ch)[0]
        if kind == "L" or (kind == "N" and unicodedata.name(ch, "").startswith(_HAN_NUMERALS)):
            out.append(ch)
            on_letter = True
        elif kind == "M":
            if on_letter:
                out.append(ch)
        else:
            # Letter-form numerals (Ⅱ, ①, ², ½) are numbers; punctuation, symbols, controls are spaces.
            value = unicodedata.numeric(ch, None) if kind == "N" else None
            out.append(" " if value is None else _numeral_words(value, chinese))
            on_letter = False


def _numeral_words(value: float, chinese: bool) -> str:
    number = Fraction(value).limit_denominator(100)
    if number.denominator == 1:
        whole = int(number)
        return _chinese_integer(str(whole)) if chinese else f" {_integer_words(str(whole))} "
    numerator, denominator = number.numerator, number.denominator
    if chinese:  # ½ -> 二分之一
        return f"{_chinese_integer(str(denominator))}分之{_chinese_integer(str(numerator))}"
    if denominator == 2:
        part = "Half" if numerator == 1 else "Halves"
    else:
        part = _ordinal(_integer_words(str(denominator))) + ("" if numerator == 1 else "s")
    return f" {_integer_words(str(numerator))} {part} "


def _number_words(match: re.Match[str]) -> str:
    whole, fraction, suffix = match.group(1), match.group(2), match.group(3)
    words = _integer_words(whole)
    if fraction is not None:
        return f"{words} Point {' '.join(_ONES[int(d)] for d in fraction)}"
    if suffix is not None:
        return _ordinal(words)
    return words


def _ordinal(words: str) -> str:
    head, _, last = words.rpartition(" ")
    if last in _ORDINALS:
        last = _ORDINALS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head} {last}".strip()


def _chinese_number_words(match: re.Match[str]) -> str:
    whole, fraction, suffix = match.group(1), match.group(2), match.group(3)
    words = _chinese_integer(whole)
    if fraction is not None:
        return f"{words}点{''.join(_CN_DIGITS[int(d)] for d in fraction)}"
    if suffix is not None:
        return f"第{words}"
    return words


def _integer_words(digits: str) -> str:
    # "007" and very long numbers (serials) are read digit by digit, as people say them.
    if (len(digits) > 1 and int(digits[0]) == 0) or len(digits) > 12:
        return " ".join(_ONES[int(d)] for d in digits)
    return _below_trillion(int(digits))


def _chinese_integer(digits: str) -> str:
    """12 -> 十二, 20 -> 二十, 101 -> 一百零一, 10010 -> 一万零一十; "007" and serials digit by digit."""
    if (len(digits) > 1 and int(digits[0]) == 0) or len(digits) > 12:
        return "".join(_CN_DIGITS[int(d)] for d in digits)
    n = int(digits)
    if n == 0:
        return _CN_DIGITS[0]
    out: list[str] = []
    gap = False  # a zero group or place since the last one written: says 零 before the next
    for size, unit in _CN_LARGE:
        group = n // size % 10_000
        if group == 0:
            gap = gap or bool(out)
            continue
        if out and (gap or group < 1000):
            out.append(_CN_DIGITS[0])
        out.append(_chinese_below_10_000(group, first=not out) + unit)
        gap = False
    return "".join(out)


def _chinese_below_10_000(n: int, *, first: bool) -> str:
    out: list[str] = []
    gap = False
    for size, unit in _CN_SMALL:
        digit = n // size % 10
        if digit == 0:
            gap = gap or bool(out)
            continue
        if gap:
            out.append(_CN_DIGITS[0])
            gap = False
        # "十二", not "一十二", at the very start of a number; "一百一十" inside one.
        out.append(("" if digit == 1 and unit == "十" and first and not out else _CN_DIGITS[digit]) + unit)
    return "".join(out)


def _below_trillion(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else f" {_ONES[n % 10]}")
    if n < 1000:
        return f"{_ONES[n // 100]} Hundred" + ("" if n % 100 == 0 else f" {_below_trillion(n % 100)}")
    for size, name in _SCALES:
        if n >= size:
            rest = n % size
            return f"{_below_trillion(n // size)} {name}" + ("" if rest == 0 else f" {_below_trillion(rest)}")
    raise AssertionError(n)  # unreachable: n < 10**12
