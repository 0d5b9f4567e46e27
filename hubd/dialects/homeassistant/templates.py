"""Home Assistant's templates for discovered devices: parsed once in hubd, rendered where they cannot hurt it.

`Templates` parses a template's source once (a cache by source text, so the ten entities of a zigbee2mqtt device
that share `{{ value_json.state }}` share one `Compiled`), which is where a config with a template that is not
one is refused. It renders a value template with `value` and `value_json` (only when the payload is JSON, as Home
Assistant does) or a command template with its variables. It offers the filters, tests and functions real
producers' templates use: float, int, round, default, is_defined, iif, from_json, to_json, regex_*,
as_timestamp, zip, namespace, `{% continue %}` and the rest (hubd.dialects.homeassistant.filters).

Where it renders:
- the commonest value templates (`{{ value_json.temperature }}`, `{{ value | float | round(1) }}`, ...) are read
  directly, in hubd's process, from Jinja's parse of them (hubd.dialects.homeassistant.direct): cheap, and
  nothing such a reading does can run long or allocate much;
- every other template, and any message the direct reading steps aside from, is rendered by Jinja in the render
  process (hubd.dialects.homeassistant.renderer), with a memory cap and a deadline, so no template, whatever it
  contains, can stall hubd's event loop or exhaust its memory.
Whatever goes wrong is a `TemplateError` with one line saying why; nothing else escapes. Imports the sandbox
(parsing), the direct reading and the render process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from hubd.dialects.homeassistant.direct import DirectReader, Payload, direct_reader
from hubd.dialects.homeassistant.renderer import RenderProcess
from hubd.dialects.homeassistant.sandbox import MAX_OUTPUT_CHARS, TemplateError, TemplateSandbox

__all__ = ["MAX_OUTPUT_CHARS", "Compiled", "Payload", "TemplateError", "Templates"]

MAX_CACHED = 4_096


class Compiled:
    """One parsed template: its source, and its direct reading when it is one of the commonest value templates."""

    __slots__ = ("direct", "source")

    def __init__(self, source: str, direct: DirectReader | None) -> None:
        self.source = source
        self.direct = direct  # the value template's text, or None to let Jinja render this payload

    def __repr__(self) -> str:
        return f"<Compiled {self.source!r}{' (direct)' if self.direct is not None else ''}>"


class Templates:
    """Parses templates once and renders them; `compiles` counts the sources actually parsed."""

    def __init__(self, renderer: RenderProcess | None = None) -> None:
        self.compiles = 0
        self._parser = TemplateSandbox()  # parses only: hubd's process never renders with Jinja
        self.renderer = renderer if renderer is not None else RenderProcess()
        self._cache: OrderedDict[str, Compiled] = OrderedDict()

    def compile(self, source: str) -> Compiled:
        """The parsed template (from the cache when the same source was parsed before); TemplateError if it is
        not a template."""
        found = self._cache.get(source)
        if found is not None:
            self._cache.move_to_end(source)
            return found
        tree = self._parser.parse_source(source)
        direct = direct_reader(tree, self._parser.filters)  # read before compiling: Jinja's optimizer may change it
        self._parser.check_compiles(tree)
        compiled = Compiled(source, direct)
        self.compiles += 1
        self._cache[source] = compiled
        if len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return compiled

    def render_value(self, template: Compiled, payload: Payload) -> str:
        """A value template's result for a payload (`value`, and `value_json` when the payload is JSON)."""
        if template.direct is not None:
            text = template.direct(payload)
            if text is not None:
                return text
        return self.render_with_jinja(template, payload)

    def render_with_jinja(self, template: Compiled, payload: Payload) -> str:
        """A value template's result as Jinja renders it (in the render process), never read directly."""
        return self.renderer.render({"source": template.source, "value": payload.text})

    def render(self, template: Compiled, variables: Mapping[str, Any]) -> str:
        """The template's text output with these variables, stripped like Home Assistant's."""
        return self.renderer.render({"source": template.source, "variables": dict(variables)})

    def prepare(self) -> None:
        """Start the render process now, so that it is ready before the first message."""
        self.renderer.prepare()

    def close(self) -> None:
        """Stop the render process."""
        self.renderer.close()
