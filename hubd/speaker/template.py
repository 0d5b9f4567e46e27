"""Command lines from speaker.yaml: split into arguments first, placeholders filled into each argument after.

Owns the one rule that keeps text from outside (a tts text, a URL, a voice command) from ever being
interpreted: `shlex.split` runs on the configured string once, when the config is read; a command's values
go into the finished arguments in a single pass, so a value that holds `{wav}` or `;` stays as it is, and
no shell ever runs. A value with a NUL (which no argument can hold) or another control character but tab,
line feed and carriage return is refused (`ValueRefused`), never passed on.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass

_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
ALLOWED_CONTROLS = "\t\n\r"  # in a value: what a spoken text's lines are made of


class ValueRefused(ValueError):
    """A value that cannot become an argument; the text names the placeholder and the character."""


def control_character(text: str, *, allowed: str = "") -> str | None:
    """The first control character in `text` (NUL to US, DEL, U+0080 to U+009F) not in `allowed`, said with its
    code point and position ("a control character (U+0000) at position 3"); None when there is none."""
    for index, char in enumerate(text):
        if char not in allowed and unicodedata.category(char) == "Cc":
            return f"a control character (U+{ord(char):04X}) at position {index + 1}"
    return None


@dataclass(frozen=True, slots=True)
class CommandTemplate:
    """A configured command: its text and its arguments with `{name}` placeholders still in them."""

    text: str
    argv: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, allowed: Collection[str], required: Collection[str] = ()) -> CommandTemplate:
        """Split `text` into arguments and check its placeholders; ValueError says what to write instead."""
        wanted = " and ".join(f"{{{name}}}" for name in allowed)
        try:
            argv = tuple(shlex.split(text))
        except ValueError as err:
            raise ValueError(f"cannot be split into arguments ({err}); check the quotes") from None
        if not argv:
            raise ValueError("is empty; give a program and its arguments")
        if _PLACEHOLDER_RE.search(argv[0]):
            raise ValueError(f"the program itself ({argv[0]!r}) cannot be a placeholder; name a program")
        used = {match.group(1) for arg in argv for match in _PLACEHOLDER_RE.finditer(arg)}
        unknown = sorted(used - set(allowed))
        if unknown:
            raise ValueError(f"{{{unknown[0]}}} is not a placeholder of this command; it takes {wanted}")
        missing = [name for name in required if name not in used]
        if missing:
            raise ValueError(f"must contain {{{missing[0]}}} (this command takes {wanted})")
        return cls(text, argv)

    @property
    def program(self) -> str:
        """The program to run (the first argument)."""
        return self.argv[0]

    def uses(self, name: str) -> bool:
        """Whether the placeholder `{name}` appears in an argument."""
        return any(f"{{{name}}}" in arg for arg in self.argv)

    def fill(self, values: Mapping[str, str]) -> list[str]:
        """The arguments with the placeholders replaced, each argument in one pass (values are never re-read);
        ValueRefused for a value with a control character."""
        for name, value in values.items():
            bad = control_character(value, allowed=ALLOWED_CONTROLS)
            if bad is not None and self.uses(name):
                raise ValueRefused(f"{{{name}}} has {bad}, which no program gets as an argument")
        out = []
        for arg in self.argv:
            filled = _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), arg)
            if filled.startswith("-") and arg != filled and _PLACEHOLDER_RE.fullmatch(arg):
                # A text such as "-w /etc/x" would read as an option of the program: a leading space keeps it
                # an operand (espeak-ng speaks it the same), whatever the program's option parser.
                filled = " " + filled
            out.append(filled)
        return out
