"""What a Home Assistant value template costs (issue 23's guard): `python -m bench.templates`.

In hubd's process a template is parsed once; the commonest value templates (`{{ value_json.x }}`, with `default`,
`is defined`, a cast or a rounding hubd reads the same) are read directly, every other one is rendered by Jinja in
the render process (`hubd.dialects.homeassistant.renderer`: a memory cap, a deadline, a kill and a restart). This
measures, per value: the direct reading; a render in the render process (one round trip of frames); the same
template rendered by Jinja in this process, as hubd did before the render process (its sandbox, for comparison
only); and how long the render process takes to come back after a template that overruns its deadline.
Best of ROUNDS rounds of N values each; printed as a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable

from hubd.dialects.homeassistant.direct import Payload
from hubd.dialects.homeassistant.sandbox import TemplateSandbox
from hubd.dialects.homeassistant.templates import TemplateError, Templates

DIRECT = "{{ value_json.temperature | default(0) }}"
RENDERED = "{{ (value_json.temperature * 9 / 5 + 32) | round(1) }} °F"  # arithmetic and a unit: Jinja renders it
SLOW = '{{ value | regex_match("(b+)+$") }}'  # backtracks past the deadline on b…b!


def _per_value_us(render: Callable[[int], object], n: int, rounds: int) -> float:
    best = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(n):
            render(i)
        best.append((time.perf_counter() - start) / n * 1e6)
    return min(best)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.templates", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="values per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    payloads = [Payload(json.dumps({"temperature": 20 + i % 100 / 10, "humidity": 50})) for i in range(args.n)]
    templates = Templates()
    templates.prepare()
    try:
        direct, rendered = templates.compile(DIRECT), templates.compile(RENDERED)
        assert direct.direct is not None and rendered.direct is None
        sandbox = TemplateSandbox()
        in_process = sandbox.template(RENDERED)
        rows = [
            ("direct reading (hubd's process)", _per_value_us(
                lambda i: templates.render_value(direct, payloads[i]), args.n, args.rounds)),
            ("render process (one round trip)", _per_value_us(
                lambda i: templates.render_value(rendered, payloads[i]), args.n, args.rounds)),
            ("Jinja in hubd's process (before the render process)", _per_value_us(
                lambda i: sandbox.run(in_process, {"value": payloads[i].text, "value_json": payloads[i].json}),
                args.n, args.rounds)),
        ]
        restarts = []
        for _ in range(5):
            slow = templates.compile(SLOW + f"{{# {time.monotonic_ns()} #}}")  # a new source: not put aside yet
            start = time.perf_counter()
            with contextlib.suppress(TemplateError):
                templates.render_value(slow, Payload("b" * 40 + "!"))
            templates.render_value(rendered, payloads[0])  # the next render, on a fresh render process
            restarts.append((time.perf_counter() - start) * 1000)
    finally:
        templates.close()
    print(f"| value template ({args.n} values, best of {args.rounds}) | µs per value |")
    print("|---|---:|")
    for what, us in rows:
        print(f"| {what} | {us:.1f} |")
    print(f"\nA template past its deadline (0.5 s), then the next render (kill and restart): median "
          f"{statistics.median(restarts):.0f} ms (of {len(restarts)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
