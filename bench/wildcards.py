"""What a wildcard state topic costs (issue 35): `python -m bench.wildcards`.

One Home Assistant discovery dialect with EXACT entities on exact state topics and FILTERS entities on Theengs-style
filters (`+/+/BTtoMQTT/<MAC>`), as `decode` sees them: a state on an exact topic, a state matched by a filter, and
`claims()` of a topic nobody reads (every message on the bus no dialect before it claimed); then finding the
filters a topic matches among FILTERS, by hubd's trie (`hubd.dialects.wildcards.FilterIndex`) and by walking them
with `topic_matches` one by one, for comparison. Best of ROUNDS rounds, µs per message; printed as a table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from hubd.config.model import HomeAssistantConfig
from hubd.dialects.base import topic_matches
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
from hubd.dialects.wildcards import MAX_FILTERS, FilterIndex

EXACT, FILTERS, N, ROUNDS = 1_000, MAX_FILTERS, 5_000, 5
NOW = 1_700_000_000.0


def _dialect() -> HomeAssistantDialect:
    dialect = HomeAssistantDialect(HomeAssistantConfig(enabled=True), [])
    for i in range(EXACT):
        config = {"stat_t": f"exact/t{i}", "dev_cla": "temperature", "uniq_id": f"t{i}", "dev": {"ids": f"t{i}"}}
        dialect.decode(f"homeassistant/sensor/t{i}/config", json.dumps(config).encode(), NOW, True)
    for i in range(FILTERS):
        config = {"stat_t": f"+/+/BTtoMQTT/{i:012X}", "dev_cla": "temperature", "uniq_id": f"b{i}",
                  "val_tpl": "{{ value_json.tempc }}", "dev": {"ids": f"b{i}"}}
        dialect.decode(f"homeassistant/sensor/b{i}/config", json.dumps(config).encode(), NOW, True)
    return dialect


def _best(run: Callable[[int], object], n: int = N) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for k in range(n):
            run(k)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> None:
    dialect = _dialect()
    filters = [f"+/+/BTtoMQTT/{i:012X}" for i in range(FILTERS)]
    index = FilterIndex()
    for pattern in filters:
        index.add(pattern)

    def gateway(k: int) -> str:
        return f"home/TheengsGateway/BTtoMQTT/{k % FILTERS:012X}"

    rows = [
        ("decode, exact state topic", _best(lambda k: dialect.decode(f"exact/t{k % EXACT}", b"21.5", NOW, False))),
        ("decode, state matched by a filter", _best(lambda k: dialect.decode(gateway(k), b'{"tempc": 21.5}', NOW,
                                                                             False))),
        ("claims(), a topic nobody reads", _best(lambda k: dialect.claims(f"other/device/{k}/state"))),
        (f"the filters a topic matches among {FILTERS}, trie", _best(lambda k: index.matches(gateway(k)))),
        (f"the same, walking the {FILTERS} with topic_matches",
         _best(lambda k: [f for f in filters if topic_matches(f, gateway(k))], 500)),
    ]
    dialect.close()
    print(f"| {EXACT} exact topics, {FILTERS} wildcard filters | µs per message |\n|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value:.1f} |")


if __name__ == "__main__":
    main()
