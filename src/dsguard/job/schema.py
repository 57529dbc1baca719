"""The job file's shape: the type and bounds of every key, checked by hand.

Why not pydantic (which this module replaced): ``dsguard validate`` is what a user runs in an
edit-check loop and what a systemd ``ExecStartPre=`` may run, and it must start in 300 ms
(bench P4). Importing pydantic and building ten small models cost 250-800 ms on a 2-core
machine, more than the rest of the command together. The shape of a job file is small and
fixed (scalars, lists of scalars, one string map), so a checker of ~250 lines does the job in
well under a millisecond and imports nothing but the standard library and the knob table.
Plain classes, not dataclasses, for the same reason: each frozen dataclass costs ~1.4 ms to
create at import.

Errors keep pydantic's vocabulary (``type``, ``loc``, ``msg``, ``input``, ``ctx``) and its
strict-mode rules, because :mod:`dsguard.job.file` turns them into ``FILE:LINE: field:
message`` lines and users know that wording:

* no coercion at all: ``micro_batch_size: "8"``, ``2.0`` or ``true`` are refused (YAML already
  produced typed scalars; coercing would accept ``lora: 1`` as something the user never wrote);
  a float field accepts an int and stores it as a float;
* every section forbids unknown keys (a typo such as ``micro_bach_size`` must not be ignored);
* an optional key that is absent gets its default; ``fields_set`` records which keys the file
  actually gave, because for some keys "absent" and ``null`` mean different things.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from dsguard.job.knobs import KNOB_SPECS, OFFLOAD_NAMES, REQUIRED_KNOBS, KnobSpec

__all__ = [
    "Bool",
    "BoolOrOneOf",
    "Float",
    "Int",
    "IntOrStr",
    "KeyedSection",
    "ListOf",
    "OneOf",
    "Section",
    "Shape",
    "ShapeError",
    "Str",
    "StrMap",
    "flag_keys",
    "spec",
    "train_keys",
]

Loc = tuple[str | int, ...]


class ShapeError:
    """One violation, in pydantic's terms: ``loc`` is the path inside the checked mapping
    (``("gpus", 1)``; ``("env", 3, "[key]")`` when a map *key* is wrong)."""

    __slots__ = ("ctx", "input", "loc", "msg", "type")

    def __init__(
        self,
        type: str,
        loc: Loc,
        msg: str,
        input: object,
        ctx: Mapping[str, Any] | None = None,
    ) -> None:
        self.type = type
        self.loc = loc
        self.msg = msg
        self.input = input
        self.ctx: Mapping[str, Any] = ctx or {}

    def __repr__(self) -> str:
        return f"ShapeError({self.type!r}, {self.loc!r}, {self.msg!r}, input={self.input!r})"


def _num(bound: float) -> str:
    """A bound as pydantic prints it: ``1``, ``0``, ``0.5``."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Shape:
    """A value's allowed type and bounds. ``check`` returns the stored value (or ``None`` when
    it failed) and the errors, located relative to ``loc``."""

    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        raise NotImplementedError

    def json_schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in _slots(type(self)))
        return f"{type(self).__name__}({args})"


def _slots(cls: type) -> list[str]:
    return [name for c in reversed(cls.__mro__) for name in getattr(c, "__slots__", ())]


class _Bounded(Shape):
    __slots__ = ("ge", "gt", "le")

    def __init__(
        self, *, ge: float | None = None, gt: float | None = None, le: float | None = None
    ) -> None:
        self.ge, self.gt, self.le = ge, gt, le

    def _bounds(self, value: float, loc: Loc) -> list[ShapeError]:
        # Same order as pydantic-core (le before ge/gt), so NaN fails on ``le`` where set.
        # ``bounds`` (beyond pydantic's ctx) carries every bound, so the job file's message
        # can name the whole valid range, not only the side that was crossed.
        bounds = {
            k: b for k, b in (("ge", self.ge), ("gt", self.gt), ("le", self.le)) if b is not None
        }
        if self.le is not None and not value <= self.le:
            msg = f"Input should be less than or equal to {_num(self.le)}"
            ctx = {"le": self.le, "bounds": bounds}
            return [ShapeError("less_than_equal", loc, msg, value, ctx)]
        if self.ge is not None and not value >= self.ge:
            msg = f"Input should be greater than or equal to {_num(self.ge)}"
            ctx = {"ge": self.ge, "bounds": bounds}
            return [ShapeError("greater_than_equal", loc, msg, value, ctx)]
        if self.gt is not None and not value > self.gt:
            msg = f"Input should be greater than {_num(self.gt)}"
            ctx = {"gt": self.gt, "bounds": bounds}
            return [ShapeError("greater_than", loc, msg, value, ctx)]
        return []

    def _schema_bounds(self, out: dict[str, Any]) -> dict[str, Any]:
        for name, bound in (("minimum", self.ge), ("exclusiveMinimum", self.gt)):
            if bound is not None:
                out[name] = bound
        if self.le is not None:
            out["maximum"] = self.le
        return out


class Int(_Bounded):
    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not _is_int(value):
            return None, [ShapeError("int_type", loc, "Input should be a valid integer", value)]
        assert isinstance(value, int)
        errors = self._bounds(value, loc)
        return (None if errors else value), errors

    def json_schema(self) -> dict[str, Any]:
        return self._schema_bounds({"type": "integer"})


class Float(_Bounded):
    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not (_is_int(value) or isinstance(value, float)):
            return None, [ShapeError("float_type", loc, "Input should be a valid number", value)]
        assert isinstance(value, int | float)
        errors = self._bounds(value, loc)
        return (None if errors else float(value)), errors

    def json_schema(self) -> dict[str, Any]:
        return self._schema_bounds({"type": "number"})


class Str(Shape):
    __slots__ = ("pattern",)

    def __init__(self, *, pattern: str | None = None) -> None:
        self.pattern = pattern

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not isinstance(value, str):
            return None, [ShapeError("string_type", loc, "Input should be a valid string", value)]
        if self.pattern is not None and re.search(self.pattern, value) is None:
            msg = f"String should match pattern '{self.pattern}'"
            ctx = {"pattern": self.pattern}
            return None, [ShapeError("string_pattern_mismatch", loc, msg, value, ctx)]
        return value, []

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.pattern is not None:
            out["pattern"] = self.pattern
        return out


class Bool(Shape):
    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not isinstance(value, bool):
            return None, [ShapeError("bool_type", loc, "Input should be a valid boolean", value)]
        return value, []

    def json_schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class OneOf(Shape):
    """One of a few strings (pydantic's ``Literal``)."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if isinstance(value, str) and value in self.values:
            return value, []
        quoted = [f"'{v}'" for v in self.values]
        expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        msg = f"Input should be {expected}"
        return None, [ShapeError("literal_error", loc, msg, value, {"expected": expected})]

    def json_schema(self) -> dict[str, Any]:
        return {"enum": list(self.values), "type": "string"}


class BoolOrOneOf(Shape):
    """A boolean or one of a few strings (``fit_probe: true`` or ``fit_probe: in_run``), with
    one error naming every accepted value."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if isinstance(value, bool) or (isinstance(value, str) and value in self.values):
            return value, []
        expected = "true, false, " + ", ".join(f"'{v}'" for v in self.values[:-1])
        expected = f"{expected} or '{self.values[-1]}'"
        msg = f"Input should be {expected}"
        return None, [ShapeError("literal_error", loc, msg, value, {"expected": expected})]

    def json_schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "boolean"}, {"enum": list(self.values), "type": "string"}]}


class IntOrStr(Shape):
    """An int or a string (``host_memory_limit: 6442450944`` or ``"6GiB"``). One error, not
    pydantic's one-per-member pair, which would point at the made-up keys ``.int``/``.str``."""

    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if _is_int(value) or isinstance(value, str):
            return value, []
        msg = "Input should be an integer or a string"
        return None, [ShapeError("int_or_string_type", loc, msg, value)]

    def json_schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}]}


class ListOf(Shape):
    __slots__ = ("item", "max_length", "min_length")

    def __init__(
        self, item: Shape, *, min_length: int | None = None, max_length: int | None = None
    ) -> None:
        self.item, self.min_length, self.max_length = item, min_length, max_length

    @staticmethod
    def _length_error(kind: str, loc: Loc, value: list[Any], limit: int) -> ShapeError:
        n = len(value)
        bound = "at most" if kind == "too_long" else "at least"
        msg = f"List should have {bound} {limit} item{'' if limit == 1 else 's'} after "
        msg += f"validation, not {n}"
        key = "max_length" if kind == "too_long" else "min_length"
        ctx = {"field_type": "List", key: limit, "actual_length": n}
        return ShapeError(kind, loc, msg, value, ctx)

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not isinstance(value, list):
            return None, [ShapeError("list_type", loc, "Input should be a valid list", value)]
        if self.max_length is not None and len(value) > self.max_length:
            return None, [self._length_error("too_long", loc, value, self.max_length)]
        out: list[object] = []
        errors: list[ShapeError] = []
        for index, item in enumerate(value):
            checked, item_errors = self.item.check(item, (*loc, index))
            out.append(checked)
            errors.extend(item_errors)
        if errors:
            return None, errors
        if self.min_length is not None and len(value) < self.min_length:
            return None, [self._length_error("too_short", loc, value, self.min_length)]
        return out, []

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": self.item.json_schema()}
        if self.min_length is not None:
            out["minItems"] = self.min_length
        if self.max_length is not None:
            out["maxItems"] = self.max_length
        return out


class StrMap(Shape):
    """A mapping of strings to strings (``env:``)."""

    __slots__ = ()

    def check(self, value: object, loc: Loc) -> tuple[object, list[ShapeError]]:
        if not isinstance(value, dict):
            return None, [ShapeError("dict_type", loc, "Input should be a valid dictionary", value)]
        errors: list[ShapeError] = []
        for k, v in value.items():
            if not isinstance(k, str):
                where = (*loc, k, "[key]")
                errors.append(ShapeError("string_type", where, "Input should be a valid string", k))
            if not isinstance(v, str):
                errors.append(
                    ShapeError("string_type", (*loc, k), "Input should be a valid string", v)
                )
        return (None if errors else dict(value)), errors

    def json_schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": {"type": "string"}}


class _Required:
    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


class _Spec:
    """What :func:`spec` leaves in a :class:`Section` body until ``__init_subclass__``
    collects it."""

    __slots__ = ("default", "nullable", "shape")

    def __init__(self, shape: Shape, default: Any, nullable: bool) -> None:
        self.shape, self.default, self.nullable = shape, default, nullable

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def fresh_default(self) -> Any:
        # A list or dict default is copied per instance (dataclasses' default_factory).
        d = self.default
        return type(d)(d) if isinstance(d, list | dict) else d


def spec(shape: Shape, default: Any = _REQUIRED, *, nullable: bool = True) -> Any:
    """Declare a key of a :class:`Section`: its shape, and its default (none: required).

    An optional key is nullable (``key: null`` is allowed and stored as ``None``); a required
    one is not. Typed ``Any`` so that ``count: int = spec(Int())`` type-checks as an ``int``
    attribute, the way ``dataclasses.field`` does.
    """
    return _Spec(shape, default, nullable and default is not _REQUIRED)


S = TypeVar("S", bound="Section")


class Section:
    """A mapping with a fixed set of keys, declared in the class body with :func:`spec`.
    Instances are read-only and built only by :meth:`check`."""

    _specs: ClassVar[dict[str, _Spec]] = {}

    #: The keys the file gave (pydantic's ``model_fields_set``): "absent" and "null" differ
    #: for some keys (``flags.lora: null`` means "never pass that flag").
    fields_set: frozenset[str]

    def __init_subclass__(cls, keys: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs = dict(cls._specs)  # inherited keys first, in declaration order
        specs.update(keys or {})  # keys derived from a table (see KeyedSection)
        for name, value in list(vars(cls).items()):
            if isinstance(value, _Spec):
                specs[name] = value
                delattr(cls, name)  # an instance always sets every key
        cls._specs = specs

    def __init__(self, fields_set: frozenset[str], values: Mapping[str, Any]) -> None:
        for name, s in self._specs.items():
            object.__setattr__(self, name, values[name] if name in values else s.fresh_default())
        object.__setattr__(self, "fields_set", fields_set)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._specs)
        return f"{type(self).__name__}({args})"

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The valid keys, in declaration order."""
        return tuple(cls._specs)

    @classmethod
    def check(cls: type[S], data: object) -> tuple[S | None, list[ShapeError]]:
        """The section built from ``data``, or ``None`` and every error (keys in
        declaration order, then unknown keys in file order)."""
        if not isinstance(data, dict):
            msg = f"Input should be a valid dictionary or instance of {cls.__name__}"
            return None, [ShapeError("model_type", (), msg, data, {"class_name": cls.__name__})]
        values: dict[str, object] = {}
        errors: list[ShapeError] = []
        for name, s in cls._specs.items():
            if name not in data:
                if s.required:
                    errors.append(ShapeError("missing", (name,), "Field required", data))
                continue
            value = data[name]
            if value is None and s.nullable:
                values[name] = None
                continue
            checked, field_errors = s.shape.check(value, (name,))
            errors.extend(field_errors)
            values[name] = checked
        for name, value in data.items():
            if not isinstance(name, str):
                errors.append(ShapeError("invalid_key", (name,), "Keys should be strings", name))
            elif name not in cls._specs:
                msg = "Extra inputs are not permitted"
                errors.append(ShapeError("extra_forbidden", (name,), msg, value))
        if errors:
            return None, errors
        return cls(frozenset(values), values), []

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON schema (draft 2020-12) of this section, for editors."""
        props: dict[str, Any] = {}
        required: list[str] = []
        for name, s in cls._specs.items():
            schema = s.shape.json_schema()
            if s.nullable:
                schema = {"anyOf": [schema, {"type": "null"}]}
            if s.required:
                required.append(name)
            else:
                schema["default"] = s.default
            props[name] = schema
        out: dict[str, Any] = {
            "title": cls.__name__,
            "type": "object",
            "properties": props,
            "additionalProperties": False,
        }
        if required:
            out["required"] = required
        return out


class KeyedSection(Section):
    """A section whose keys come from a table (``class S(KeyedSection, keys=...)``) rather
    than from its class body, so that a list kept elsewhere (the knobs) is not copied here.
    Its attributes are typed ``Any``; the table, not the class body, says which exist."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


def _train_shape(knob: KnobSpec) -> Shape:
    if knob.kind == "bool":
        return Bool()
    if knob.kind == "offload":
        return OneOf(OFFLOAD_NAMES)
    return Int(ge=knob.minimum, le=knob.maximum)


def train_keys() -> dict[str, Any]:
    """``train:``'s keys: one per knob, required where the knob has no default. An unset knob
    stays ``None`` so :class:`~dsguard.job.knobs.Knobs` supplies its default (one source of
    truth) and so "set by the user" (``explicit_knobs``) stays observable."""
    return {
        name: spec(_train_shape(knob)) if name in REQUIRED_KNOBS else spec(_train_shape(knob), None)
        for name, knob in KNOB_SPECS.items()
    }


def flag_keys() -> dict[str, Any]:
    """``flags:``'s keys: one per knob that reaches the script as a flag. An absent key keeps
    the HF default; ``null`` means never pass that knob (``fields_set`` tells the two apart)."""
    return {name: spec(Str(), None) for name, knob in KNOB_SPECS.items() if knob.flag is not None}
