"""YAML as PyYAML's SafeLoader reads it, except that a key given twice in one mapping is an error.

PyYAML keeps the last of two equal keys, so a second `model_dir:` further down a long file, or a repeated key in
`--set 'tasks={all: {...}, all: {...}}'`, would silently win over the one a user reads first. Keys that a merge
(`<<: *defaults`) brings in may still be overridden, as YAML intends. The cluster file and `--set` are read
with `strict_load`; a sweep's `--param` values are scalars (sweep/space.py), where no key can repeat.
"""

from __future__ import annotations

import functools


class DuplicateKey(Exception):
    """`key` at line `line` (1-based, of the text given) repeats the key first given at line `first`."""

    def __init__(self, key, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


@functools.lru_cache(maxsize=None)
def _strict_loader():
    import yaml  # pylint: disable=import-outside-toplevel  # `--help` stays instant

    class StrictLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader's own error names it
                    continue
                if first is not None:
                    raise DuplicateKey(key, key_node.start_mark.line + 1, first)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def strict_load(text: str):
    """The document of `text`; raises DuplicateKey, or yaml.YAMLError as yaml.safe_load would."""
    import yaml  # pylint: disable=import-outside-toplevel

    return yaml.load(text, Loader=_strict_loader())  # nosec B506: a SafeLoader
