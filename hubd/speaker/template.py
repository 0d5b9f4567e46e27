"""Command lines from speaker.yaml: split into arguments first, placeholders filled into each argument after.

Owns the one rule that keeps text from outside (a tts text, a URL, a voice command) from ever being
interpreted: `shlex.split` runs on the configured string once, when the config is read; a command's values
go into the finished arguments in a single pass, so a value that holds `{wav}` or `;` stays as it is, and
no shell ever runs. Imports nothing from hubd.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass

_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
        """The arguments with the placeholders replaced, each argument in one pass (values are never re-read)."""
        out = []
        for arg in self.argv:
            filled = _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), arg)
            if filled.startswith("-") and arg != filled and _PLACEHOLDER_RE.fullmatch(arg):
                # A text such as "-w /etc/x" would read as an option of the program: a leading space keeps it
                # an operand (espeak-ng speaks it the same), whatever the program's option parser.
                filled = " " + filled
            out.append(filled)
        return out
