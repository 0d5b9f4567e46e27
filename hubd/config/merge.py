"""YAML merge keys (`<<:`), applied in the order the YAML spec gives (pure): the mapping's own keys win over merged
ones; of a list of merged mappings, the first wins. Done here rather than by PyYAML's `flatten_mapping`, whose order
for a list changed between releases.
"""

from __future__ import annotations

import yaml

YAML_TAG = "tag:yaml.org,2002:"


class MergeError(Exception):
    """A `<<:` whose value is not a mapping or a list of mappings; `line` is where that value starts."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


def merged_pairs(node: yaml.MappingNode, within: frozenset[int] = frozenset()) -> list[tuple[yaml.Node, yaml.Node]]:
    """The mapping's (key, value) pairs with `<<:` merge keys applied, in an order where the last one wins.

    The YAML merge-key rules (yaml.org/type/merge.html): keys written in the mapping win over merged ones;
    of the merged mappings, the first in a `<<: [*a, *b]` list wins. Done here rather than by PyYAML's
    `flatten_mapping`, whose order for a list changed between releases (6.0.4 lets the last one win).
    The nodes are not changed: an anchor's mapping may be merged in several places.
    """
    if id(node) in within:  # `&a {<<: *a}`: a mapping merged into itself
        raise MergeError(node.start_mark.line + 1)
    within = within | {id(node)}
    merged: list[tuple[yaml.Node, yaml.Node]] = []
    own: list[tuple[yaml.Node, yaml.Node]] = []
    for key_node, value_node in node.value:
        if key_node.tag != YAML_TAG + "merge":
            own.append((key_node, value_node))
            continue
        if isinstance(value_node, yaml.MappingNode):
            sources = [value_node]
        elif isinstance(value_node, yaml.SequenceNode):
            sources = []
            for item in value_node.value:
                if not isinstance(item, yaml.MappingNode):
                    raise MergeError(item.start_mark.line + 1)
                sources.append(item)
        else:
            raise MergeError(value_node.start_mark.line + 1)
        for source in reversed(sources):  # the first source last, so that it wins
            merged.extend(merged_pairs(source, within))
    return merged + own
