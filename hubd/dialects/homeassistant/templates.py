"""Home Assistant's templates for discovered devices: parsed once in hubd, rendered where they cannot hurt it.

`Templates` parses a template's source once (a cache by source text, so the ten entities of a zigbee2mqtt device
that share `{{ value_json.state }}` share one `Compiled`), which is where a config with a template that is not
one, or that names a filter or test hubd does not have, is refused. It renders a value template with `value` and
`value_json` (only when the payload is JSON, as Home Assistant does) or a command template with its variables.
It offers the filters, tests and functions real producers' templates use: float, int, round, default,
is_defined, iif, from_json, to_json, regex_*, as_timestamp, zip, namespace, `{% continue %}` and the rest
(hubd.dialects.homeassistant.filters).

A template comes from a device, so hubd's process never compiles or evaluates one with Jinja: it only parses it
(Jinja's parser builds a tree and runs nothing) and reads that tree (`ParseOnlySandbox` has no compiler: Jinja's
compile step folds constants, which calls filters on literal arguments, so `{{ "a…a!" | regex_replace("(a+)+$",
"") }}` would run here, in the event loop, before any render). Where it renders:
- the commonest value templates (`{{ value_json.temperature }}`, `{{ value | float | round(1) }}`, ...) are read
  directly, in hubd's process, from the parse (hubd.dialects.homeassistant.direct): cheap, and nothing such a
  reading does can run long or allocate much;
- every other template, and any message the direct reading steps aside from, is compiled and rendered by Jinja in
  the render process (hubd.dialects.homeassistant.renderer), with a memory cap and a deadline, so no template,
  whatever it contains, literals included, can stall hubd's event loop or exhaust its memory.
Whatever goes wrong is a `TemplateError` with one line saying why; nothing else escapes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from jinja2 import nodes

from hubd.dialects.homeassistant.direct import DirectReader, Payload, direct_reader
from hubd.dialects.homeassistant.renderer import RenderProcess
from hubd.dialects.homeassistant.sandbox import MAX_OUTPUT_CHARS, TemplateError, TemplateSandbox

__all__ = ["MAX_OUTPUT_CHARS", "Compiled", "ParseOnlySandbox", "Payload", "TemplateError", "Templates", "check_names"]

MAX_CACHED = 4_096


class ParseOnlySandbox(TemplateSandbox):
    """The sandbox as hubd's own process has it: it parses templates and knows the filters' and tests' names; it
    never compiles one (a device's template is compiled, and run, only in the render process)."""

    def _generate(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("hubd's process never compiles a device's template; the render process does")


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
        self._parser = ParseOnlySandbox()  # hubd's process never compiles or renders with Jinja
        self.renderer = renderer if renderer is not None else RenderProcess()
        self._cache: OrderedDict[str, Compiled] = OrderedDict()

    def compile(self, source: str) -> Compiled:
        """The parsed template (from the cache when the same source was parsed before); TemplateError if it is
        not a template. Parses only: nothing of the template is compiled or run here."""
        found = self._cache.get(source)
        if found is not None:
            self._cache.move_to_end(source)
            return found
        tree = self._parser.parse_source(source)
        check_names(tree, self._parser)
        compiled = Compiled(source, direct_reader(tree, self._parser.filters))
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


def check_names(tree: nodes.Template, sandbox: TemplateSandbox) -> None:
    """TemplateError for a filter or test the sandbox does not have, where Jinja's compiler would refuse it (one
    inside an `if` or an inline `if` fails only where it runs: left to the render). A walk of the parse that
    evaluates nothing."""
    for node, soft in _walk(tree):
        if soft or not isinstance(node, nodes.Filter | nodes.Test):
            continue
        kind, known = ("filter", sandbox.filters) if isinstance(node, nodes.Filter) else ("test", sandbox.tests)
        if node.name not in known:
            raise TemplateError(f"not a valid template (line {node.lineno}: No {kind} named {node.name!r}.)")


def _walk(tree: nodes.Node) -> Iterator[tuple[nodes.Node, bool]]:
    """Every node of a parse (without recursion: a parse may be nested deeply), and whether it is inside an `if`
    or an inline `if`."""
    stack = [(tree, False)]
    while stack:
        node, soft = stack.pop()
        yield node, soft
        inner = soft or isinstance(node, nodes.If | nodes.CondExpr)
        stack.extend((child, inner) for child in node.iter_child_nodes())
