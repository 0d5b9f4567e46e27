"""Home Assistant's templates as Jinja2 runs them: the immutable sandbox, its limits, and one render request.

`TemplateSandbox` is Jinja's immutable sandbox with the extensions, filters, tests and functions real producers'
templates use (hubd.dialects.homeassistant.filters) and the limits of one render: a time budget checked on every
call, attribute and item access and binary operation, a bounded `range`, a bounded output, and no repeating or
concatenating of strings and lists into huge ones. `render(request)` answers one request of the render process
(`hubd.dialects.homeassistant.worker`): a template source (compiled once, kept by source) with the variables of
a value template (`value`, and `value_json` when the payload is JSON, as Home Assistant does) or of a command.
Whatever goes wrong is a `TemplateError` with one line saying why.

These limits make a well-behaved template fail fast with a clear reason; they are not what keeps hubd safe from a
hostile one (a regex that backtracks for ever, a loop with nothing to check in it, a filter that allocates
gigabytes in one C call): that is the render process, which runs this module with a memory limit and is killed
at a deadline (hubd.dialects.homeassistant.renderer). Frames (`write_frame`, `read_frame`) are the process's
wire: a 4-byte length, then JSON.

Compiling evaluates nothing of a template. Jinja folds constant expressions while it compiles: its optimizer,
and its code generator on its own (every child of `{{ }}`, and `{% autoescape %}`'s value, through `as_const`,
which calls filters and tests on literal arguments). A template of literals only (`"a…a!" | regex_replace(
"(a+)+$", "")`, `"x" | center(65000)` chained) would then run while compiling, outside every limit of a render.
So the sandbox compiles without the optimizer and with `UnfoldedCodeGenerator`, which folds only literals: all
of a template runs when it renders, within the budget, the memory cap and the deadline. hubd's own process
never compiles a device's template at all (hubd.dialects.homeassistant.templates): it parses, and reads the parse.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hubd.dialects.homeassistant.filters import FILTERS, GLOBALS, TESTS

MAX_SOURCE_CHARS = 16_384
MAX_OUTPUT_CHARS = 65_536
MAX_RANGE_ITEMS = 10_000  # all range() calls of one render together
MAX_COMPILED = 4_096
RENDER_BUDGET_S = 0.25  # a real template renders in well under a millisecond
MAX_FRAME_BYTES = 1 << 20
FRAME_HEAD = struct.Struct(">I")


class TemplateError(Exception):
    """A template that does not compile or fails to render (the text says why)."""


class TemplateOvertime(TemplateError):
    """A render that ran past its budget: the render process's answer says so (`overtime`), and hubd puts the
    template aside."""


class Overtime(BaseException):
    """Raised into a render that ran past its budget (a BaseException: no `except Exception` in Jinja or a filter
    may swallow it)."""


OVERTIME = f"took longer than {RENDER_BUDGET_S} s"
OVERTIME_ANSWER = {"error": OVERTIME, "overtime": True}
UNDEFINED_JSON = jinja2.Undefined(name="value_json", hint="the payload is not JSON")


def payload_json(text: str) -> Any:
    """The payload parsed as JSON, or jinja2's Undefined when it is not JSON (as Home Assistant gives templates)."""
    try:
        return json.loads(text) if text[:1] in "{[\"-0123456789tfn" else UNDEFINED_JSON
    except (ValueError, RecursionError):
        return UNDEFINED_JSON


class _DictGlobal:
    """`dict` in templates: Python's dict, and `dict.from_keys(pairs)` that zigbee2mqtt's event templates use."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    @staticmethod
    def from_keys(pairs: Iterable[Any]) -> dict[Any, Any]:
        return {pair[0]: pair[1] for pair in pairs}


class UnfoldedCodeGenerator(CodeGenerator):
    """Jinja's code generator folding nothing but literals: what `{{ }}` prints and `{% autoescape %}` sets is
    worked out when the template renders, never while it compiles (Jinja's own generator calls `as_const` on
    both, which runs filters and tests on constant arguments, even without the optimizer)."""

    def _output_child_to_const(self, node: nodes.Expr, frame: Frame, finalize: Any) -> str:
        if type(node) not in (nodes.TemplateData, nodes.Const):
            raise nodes.Impossible()  # rendered at run time, like any expression
        return super()._output_child_to_const(node, frame, finalize)

    def visit_EvalContextModifier(self, node: nodes.EvalContextModifier, frame: Frame) -> None:
        for keyword in node.options:
            self.writeline(f"context.eval_ctx.{keyword.key} = ")
            self.visit(keyword.value, frame)
            if type(keyword.value) is nodes.Const:
                setattr(frame.eval_ctx, keyword.key, keyword.value.value)
            else:
                frame.eval_ctx.volatile = True  # known only when it renders (what Jinja does for a non-constant)


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """The sandbox with Home Assistant's additions, the limits of one render, and the compiled templates."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = UnfoldedCodeGenerator

    def __init__(self) -> None:
        super().__init__(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"], autoescape=False,
                         undefined=jinja2.Undefined, optimized=False)  # no constant folding: see the module
        self._deadline = math.inf
        self._range_left = MAX_RANGE_ITEMS
        self._compiled: OrderedDict[str, jinja2.Template] = OrderedDict()
        self.compiled = 0  # sources compiled, and renders done (what `{"stats": true}` answers)
        self.renders = 0
        self.filters.update(FILTERS)
        self.filters.update(_bounded(self.filters))
        self.tests.update(TESTS)
        self.globals.update(GLOBALS)
        self.globals["range"] = self._range
        self.globals["dict"] = _DictGlobal()

    def parse_source(self, source: str) -> Any:
        """Jinja's parse of a template source (TemplateError when it is too long or not a template)."""
        if len(source) > MAX_SOURCE_CHARS:
            raise TemplateError(f"the template has {len(source)} characters; at most {MAX_SOURCE_CHARS}")
        try:
            return self.parse(source)
        except jinja2.TemplateSyntaxError as err:
            raise TemplateError(f"not a valid template (line {err.lineno}: {err.message})") from err
        except (RecursionError, MemoryError) as err:
            raise TemplateError("the template is nested too deeply") from err
        except Exception as err:  # e.g. ValueError: a number literal with more digits than Python reads
            raise TemplateError(f"not a valid template ({type(err).__name__}: {str(err)[:120]})") from err

    def template(self, source: str) -> jinja2.Template:
        """The compiled template of a source (compiled once: kept by source, the least recently used dropped)."""
        found = self._compiled.get(source)
        if found is not None:
            self._compiled.move_to_end(source)
            return found
        tree = self.parse_source(source)
        try:
            template = self.from_string(tree)
        except (RecursionError, MemoryError) as err:
            raise TemplateError("the template is nested too deeply") from err
        except Exception as err:
            raise TemplateError(f"not a valid template ({type(err).__name__}: {str(err)[:120]})") from err
        with contextlib.suppress(AttributeError, TypeError):
            # A flat copy of the globals (the same names and values): Jinja's ChainMap over the environment's is
            # copied key by key on every render, a plain dict in one step. Never changed in place (Jinja shares it).
            template.globals = dict(template.globals)
        self._compiled[source] = template
        self.compiled += 1
        if len(self._compiled) > MAX_COMPILED:
            self._compiled.popitem(last=False)
        return template

    def run(self, template: jinja2.Template, variables: Mapping[str, Any]) -> str:
        """Render within the budget, stripped like Home Assistant's output; every failure becomes a TemplateError."""
        self._deadline = time.monotonic() + RENDER_BUDGET_S
        self._range_left = MAX_RANGE_ITEMS
        self.renders += 1
        out: list[str] = []
        size = 0
        try:
            for chunk in template.generate(variables):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateError(f"the output passed {MAX_OUTPUT_CHARS} characters")
                out.append(chunk)
        except TemplateError:
            raise
        except Overtime as err:
            raise TemplateOvertime(OVERTIME) from err
        except SecurityError as err:
            raise TemplateError(f"not allowed in a template: {err}") from err
        except jinja2.UndefinedError as err:
            raise TemplateError(f"{err.message or err}") from err
        except jinja2.TemplateError as err:
            raise TemplateError(str(err)) from err
        except MemoryError as err:
            raise TemplateError("the template needed more memory than a render may have") from err
        except RecursionError as err:
            raise TemplateError("the template recursed too deeply") from err
        except Exception as err:  # a filter's ValueError, a TypeError, KeyError, re.error, OverflowError, ...
            raise TemplateError(f"{type(err).__name__}: {str(err)[:200]}") from err
        finally:
            self._deadline = math.inf
        return "".join(out).strip()

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_time()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self._check_time()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self._check_time()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self._check_time()
        if operator == "**" and isinstance(right, int | float) and abs(right) > 100:
            raise SecurityError("an exponent above 100")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int) and \
                        len(seq) * times > MAX_OUTPUT_CHARS:
                    raise SecurityError(f"repeating a sequence past {MAX_OUTPUT_CHARS} items")
        if operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple) and \
                len(left) + len(right) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"joining sequences past {MAX_OUTPUT_CHARS} items")
        if operator == "%" and isinstance(left, str) and re.search(r"%[-#0 +]*(?:\*|\d{5,})", left):
            raise SecurityError("a %-format with a width of 10,000 or more")
        return super().call_binop(context, operator, left, right)

    def _range(self, *args: int) -> range:
        items = range(*args)
        self._range_left -= len(items)
        if self._range_left < 0:
            raise SecurityError(f"range() past {MAX_RANGE_ITEMS} items in one render")
        return items

    def _check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise Overtime


_WIDTH_RE = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _refuse_wide(text: Any) -> None:
    """A %-format whose widths or precisions would make a string past the output cap (or `*`: from the args)."""
    for width, precision in _WIDTH_RE.findall(str(text)[:MAX_SOURCE_CHARS]):
        for number in (width, precision):
            if number == "*" or (number and (len(number) > 6 or int(number) > MAX_OUTPUT_CHARS)):
                raise SecurityError(f"a %-format width or precision past {MAX_OUTPUT_CHARS}")


def _bounded(filters: Mapping[str, Any]) -> dict[str, Any]:
    """Jinja's own filters whose output can be far larger than their input, refusing before they allocate: each
    checks the size of what it would make against MAX_OUTPUT_CHARS (what a render may output at most anyway)."""
    center, indent, fmt = filters["center"], filters["indent"], filters["format"]
    replace, join, wordwrap, tojson = filters["replace"], filters["join"], filters["wordwrap"], filters["tojson"]

    def bounded_center(value: Any, width: int = 80) -> Any:
        if isinstance(width, int) and width > MAX_OUTPUT_CHARS:
            raise SecurityError(f"center() wider than {MAX_OUTPUT_CHARS}")
        return center(value, width)

    def bounded_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> Any:
        each = width if isinstance(width, int) else len(str(width))
        if (str(value).count("\n") + 1) * max(each, 0) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"indent() past {MAX_OUTPUT_CHARS} characters")
        return indent(value, width, *args, **kwargs)

    def bounded_format(value: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_wide(value)
        return fmt(value, *args, **kwargs)

    @jinja2.pass_eval_context
    def bounded_replace(eval_ctx: Any, value: Any, old: Any, new: Any, count: Any = None) -> Any:
        text, old_text, new_text = str(value), str(old), str(new)
        times = len(text) + 1 if not old_text else text.count(old_text)
        if isinstance(count, int) and count >= 0:
            times = min(times, count)
        if len(text) + times * max(len(new_text) - len(old_text), 0) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"replace() past {MAX_OUTPUT_CHARS} characters")
        return replace(eval_ctx, value, old, new, count)

    @jinja2.pass_eval_context
    def bounded_join(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> Any:
        items = list(value) if isinstance(value, Iterable) else value
        if isinstance(items, list) and len(items) > 1 and (len(items) - 1) * len(str(d)) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"join() past {MAX_OUTPUT_CHARS} characters")
        return join(eval_ctx, items, d, attribute)

    @jinja2.pass_environment
    def bounded_wordwrap(environment: Any, s: Any, width: int = 79, break_long_words: bool = True,
                         wrapstring: Any = None, break_on_hyphens: bool = True) -> Any:
        wrap = len(str(wrapstring)) if wrapstring is not None else 1
        if isinstance(width, int) and len(str(s)) * (1 + wrap / max(width, 1)) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"wordwrap() past {MAX_OUTPUT_CHARS} characters")
        return wordwrap(environment, s, width, break_long_words, wrapstring, break_on_hyphens)

    @jinja2.pass_eval_context
    def bounded_tojson(eval_ctx: Any, value: Any, indent: Any = None) -> Any:
        if isinstance(indent, int) and indent > 16:
            raise SecurityError("tojson() with an indent above 16")
        return tojson(eval_ctx, value, indent)

    return {"center": bounded_center, "indent": bounded_indent, "format": bounded_format,
            "replace": bounded_replace, "join": bounded_join, "wordwrap": bounded_wordwrap, "tojson": bounded_tojson}


def render(sandbox: TemplateSandbox, request: Mapping[str, Any]) -> dict[str, Any]:
    """One request of the render process: `{"source", "value"}` for a value template (`value_json` from `value`
    when it is JSON) or `{"source", "variables"}` for a command; the answer `{"text"}` or `{"error"}`.
    `{"stats": true}` answers how many sources were compiled and renders done."""
    if request.get("stats"):
        return {"compiled": sandbox.compiled, "renders": sandbox.renders}
    try:
        source = request.get("source")
        if not isinstance(source, str):
            raise TemplateError("no template source")
        template = sandbox.template(source)
        value = request.get("value")
        if isinstance(value, str):
            variables: Mapping[str, Any] = {"value": value, "value_json": payload_json(value)}
        else:
            given = request.get("variables")
            variables = given if isinstance(given, dict) else {}
        return {"text": sandbox.run(template, variables)}
    except TemplateOvertime:
        return OVERTIME_ANSWER
    except TemplateError as err:
        return {"error": str(err)}
    except Overtime:
        return OVERTIME_ANSWER
    except MemoryError:
        return {"error": "the template needed more memory than a render may have"}


def write_frame(stream: BinaryIO, message: Mapping[str, Any]) -> None:
    """One frame: the JSON message's length (4 bytes, big-endian), then the message."""
    stream.write(frame_bytes(message))
    stream.flush()


def frame_bytes(message: Mapping[str, Any]) -> bytes:
    """A frame as bytes (what write_frame writes)."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")
    return FRAME_HEAD.pack(len(body)) + body


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """The next frame's message, or None at the end of the stream; ValueError for a damaged frame."""
    head = stream.read(FRAME_HEAD.size)
    if not head:
        return None
    if len(head) < FRAME_HEAD.size:
        raise ValueError("a frame cut short")
    (length,) = FRAME_HEAD.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {length} bytes")
    body = stream.read(length)
    if len(body) < length:
        raise ValueError("a frame cut short")
    return frame_message(body)


def frame_message(body: bytes) -> dict[str, Any]:
    """A frame's body as its JSON object; ValueError when it is not one."""
    try:
        message = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("a frame that is not JSON") from None
    if not isinstance(message, dict):
        raise ValueError("a frame that is not a JSON object")
    return message
