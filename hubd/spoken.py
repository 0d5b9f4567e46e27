"""Spoken names: a displayName or room as the platform takes it, numbers as words and no punctuation.

The platform refuses names with digits or punctuation. `spoken()` spells numbers as words (Chinese ones in a
name with Chinese, Japanese or Korean letters, else English) and drops punctuation and symbols. Pure; used by
`hubd.devices.conformance` on every config, by the zigbee2mqtt import for its names, and by the speaker's
config check.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

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
