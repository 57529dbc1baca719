"""One way for the frozen dataclasses to become JSON-ready dicts and back: msgspec.

:func:`as_builtins` is what every ``as_dict`` returns: fields in declaration order, enums as
their values, ``Path`` as a str, ``None`` kept, nested records as nested dicts, tuples and sets
as lists (a set in iteration order: a caller that needs a stable order sorts it). It is the
shape a JSON round trip gives back, so ``from_dict(as_dict(x)) == x``.

:func:`from_builtins` is what every ``from_dict`` returns: lax (``"3"`` is read as an int, an
int as a float), unknown keys ignored, a missing key takes the field's default (a field
without one is required). The dataclasses keep their defaults for exactly that reason: a
``state.json`` written by an older dsguard may lack a key that a newer one writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, TypeVar, cast

import msgspec

__all__ = ["as_builtins", "from_builtins"]

T = TypeVar("T")


def as_builtins(record: object) -> dict[str, Any]:
    """``record`` (a dataclass or Struct) as a dict of builtins, tuples as lists."""
    return cast(dict[str, Any], _lists(msgspec.to_builtins(record, enc_hook=_encode)))


def from_builtins(data: Mapping[str, Any], cls: type[T]) -> T:
    """Inverse of :func:`as_builtins`; :class:`msgspec.ValidationError` (a ValueError) when
    ``data`` does not fit ``cls``."""
    return msgspec.convert(dict(data), cls, strict=False, dec_hook=_decode)


def _encode(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    raise NotImplementedError(f"no builtin form for {type(value).__name__}")


def _decode(cls: type, value: object) -> object:
    if issubclass(cls, PurePath) and isinstance(value, str):
        return cls(value)
    raise NotImplementedError(f"cannot read a {cls.__name__} from {type(value).__name__}")


def _lists(value: object) -> object:
    # msgspec.to_builtins keeps tuples (and gives sets as lists); JSON, and the dicts dsguard
    # always wrote, have lists.
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
