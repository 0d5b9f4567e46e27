"""The red team's literal-only templates (issue 31): every part a constant, so Jinja could fold the whole of each
while compiling it, in whichever process compiles it. Catastrophic regexes, memory by `center(65000)` chained
with `regex_replace`, `*` repeats, `range` loops, `~` concatenation, `format`, `join`, nested loops, and an
`{% autoescape %}` whose value is a bomb (Jinja's code generator folds that one even without its optimizer).
`LITERAL_BOMBS` each fail when rendered (past the deadline, the memory cap or a sandbox limit); `LITERAL_TRIPWIRES`
are harmless ones whose only cost is that they call a filter or test, so a process that folds constants is caught
at once rather than after a stall.
"""

from __future__ import annotations

A40 = "a" * 40 + "!"  # (a+)+$ on it backtracks 2**40 times
BLOW_UP = ' | regex_replace(" ", "          ")'  # ten times longer each time

LITERAL_BOMBS: dict[str, str] = {
    "regex_replace backtracking": f'{{{{ "{A40}" | regex_replace("(a+)+$", "") }}}}',
    "regex_match backtracking": f'{{{{ "{A40}" | regex_match("(a+)+$") }}}}',
    "regex_search backtracking": f'{{{{ "{A40}" | regex_search("(a|aa)+$") }}}}',
    "regex_findall backtracking": f'{{{{ "{"a" * 40}" | regex_findall("(a*)*b") }}}}',
    "match test backtracking": f'{{{{ "{A40}" is match("(a+)+$") }}}}',
    "center chained with regex_replace": '{{ "x" | center(65000)' + BLOW_UP * 4 + " }}",
    "string repeat": '{{ ("x" | center(65000)) * 65000 }}',
    "range loops": '{% for i in range(100000) %}{% for j in range(100000) %}{{ "" }}{% endfor %}{% endfor %}',
    "concatenation": "{{ " + " ~ ".join(['("x" | center(65000)' + BLOW_UP + ")"] * 12) + " }}",
    "format": '{{ "%65000s%65000s%65000s%65000s" | format("a", "b", "c", "d")' + BLOW_UP * 3 + " }}",
    "join": '{{ ("x" | center(65000)) | list | join("y" | center(65000)) }}',
    "nested loops": '{% for a in "x" | center(3000) %}{% for b in "x" | center(3000) %}'
                    '{% for c in "x" | center(3000) %}{% endfor %}{% endfor %}{% endfor %}',
    "autoescape value": f'{{% autoescape "{A40}" is match("(a+)+$") %}}x{{% endautoescape %}}',
}

LITERAL_TRIPWIRES: dict[str, str] = {
    "a filter": '{{ "a" | upper }}',
    "a test": '{{ 7 is odd }}',
    "a filter's argument": '{{ "a" | default("b" | upper) }}',
    "an inline if": '{{ ("a" | upper) if "b" is string else "c" }}',
    "a concatenation": '{{ "a" ~ ("b" | upper) }}',
    "an autoescape value": '{% autoescape "a" is string %}x{% endautoescape %}',
}
