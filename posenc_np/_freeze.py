"""Hashable, reversible forms of configuration values (scaling dicts, keyword arguments).

Cache keys and static jit arguments must be hashable; a pasted Hugging Face `rope_scaling` dict holds
lists. `thaw(freeze(x)) == x` for dicts, lists, tuples and scalars.
"""

from __future__ import annotations

__all__ = ["freeze", "thaw"]


def freeze(value):
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(freeze(v) for v in value))
    return value


def thaw(value):
    if isinstance(value, tuple) and value and value[0] == "dict":
        return {k: thaw(v) for k, v in value[1]}
    if isinstance(value, tuple) and value and value[0] == "list":
        return [thaw(v) for v in value[1]]
    return value
