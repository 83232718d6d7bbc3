"""A running count's state as JSON, and back into a fresh instance (`agent.store.output_figures`
keeps the merged output's figures from one invocation to the next).

`capture(obj, names)` encodes the named attributes; `restore(obj, state, names)` sets them on a
fresh `obj`, which gives the shape: an attribute that is an object of its own (a `Spend`, a
sample) is restored field by field into the one the fresh instance holds, the others are
replaced by the decoded value, which must be of the type the fresh one has. Containers keep
their type (Counter, dict with any JSON keys, tuple, array.array, random.Random's state);
numbers, strings, booleans and None are as JSON has them (a float's repr round-trips). Anything
else raises TypeError when captured; a state that does not fit raises ValueError when restored.
"""

from __future__ import annotations

import base64
import random
import zlib
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

TAG = "\x00"  # the key of a tagged container (a plain dict is tagged too: no key of its own clashes)
_SCALARS = (bool, int, float, str, type(None))
_PLAIN = frozenset(_SCALARS)


def capture(obj: object, names: Iterable[str]) -> dict[str, Any]:
    """`obj`'s attributes `names`, encoded."""
    return {name: encode(getattr(obj, name)) for name in names}


def restore(obj: object, state: Any, names: Iterable[str]) -> None:
    """Set `obj`'s attributes `names` from `state` (`capture`'s); ValueError when it does not fit."""
    wanted = list(names)
    if not isinstance(state, dict) or sorted(state) != sorted(wanted):
        raise ValueError(f"{type(obj).__name__}: the state names other fields")
    for name in wanted:
        _restore_into(obj, name, state[name])


def encode(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list):
        return value if _plain(value) else [encode(item) for item in value]
    if isinstance(value, Counter | dict):
        kind = "counter" if isinstance(value, Counter) else "dict"
        keys, values = list(value), list(value.values())
        if all(type(key) is str for key in keys) and _plain(values):  # (one per prompt: a fast path)
            return {TAG: kind, "keys": keys, "values": values}
        return {TAG: kind, "items": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [encode(item) for item in value]}
    if isinstance(value, array):
        packed = zlib.compress(value, 1)  # a run's per-entry numbers: small, alike; no copy first
        return {TAG: "array", "type": value.typecode, "data": base64.b64encode(packed).decode()}
    if isinstance(value, random.Random):
        return {TAG: "random", "state": encode(value.getstate())}
    if hasattr(value, "__dict__"):
        return {TAG: "fields", "fields": {k: encode(v) for k, v in vars(value).items()}}
    raise TypeError(f"no encoding for {type(value).__name__}")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return value if _plain(value) else [decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind in ("counter", "dict"):
        if "keys" in value and _plain(value["values"]):
            pairs: Iterable[tuple[Any, Any]] = zip(value["keys"], value["values"], strict=True)
        else:
            pairs = ((_key(decode(k)), decode(v)) for k, v in value["items"])
        return Counter(dict(pairs)) if kind == "counter" else dict(pairs)
    if kind == "tuple":
        return tuple(decode(item) for item in value["items"])
    if kind == "array":
        decoded = array(value["type"])
        try:
            decoded.frombytes(zlib.decompress(base64.b64decode(value["data"], validate=True)))
        except zlib.error as exc:
            raise ValueError(f"an array that does not decompress: {exc}") from None
        return decoded
    raise ValueError(f"not a decodable value: {kind!r}")


def _plain(values: list[Any]) -> bool:
    """Whether every item is a JSON scalar or a list of them: its own encoding, as it is."""
    scalars = _PLAIN
    return all(type(v) in scalars or (type(v) is list and all(type(x) in scalars for x in v)) for v in values)


def _key(key: Any) -> Any:
    if isinstance(key, list | dict):
        raise ValueError("an unhashable key")
    return key


def _restore_into(owner: object, name: str, value: Any) -> None:
    current = getattr(owner, name)
    kind = value.get(TAG) if isinstance(value, dict) else None
    if kind == "fields":
        fields = value["fields"]
        if not isinstance(fields, Mapping) or sorted(fields) != sorted(vars(current)):
            raise ValueError(f"{name}: the state names other fields")
        for field in fields:
            _restore_into(current, field, fields[field])
    elif kind == "random" and isinstance(current, random.Random):
        current.setstate(decode(value["state"]))
    else:
        decoded = decode(value)
        if type(decoded) is not type(current) and not (isinstance(current, float) and type(decoded) is int):
            raise ValueError(f"{name}: a {type(decoded).__name__} where a {type(current).__name__} was")
        if isinstance(current, array) and decoded.typecode != current.typecode:
            raise ValueError(f"{name}: an array of {decoded.typecode!r}, not {current.typecode!r}")
        setattr(owner, name, float(decoded) if isinstance(current, float) else decoded)
