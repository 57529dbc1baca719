"""The job file's shape checker (``dsguard.job.schema``): strict types, bounds, unknown keys,
defaults and ``fields_set``, pure and in milliseconds. The messages users see are tested
through ``load_job`` in test_jobfile.py; here the error records themselves."""

from __future__ import annotations

import math

import pytest

from dsguard.job.schema import (
    Bool,
    Float,
    Int,
    IntOrStr,
    ListOf,
    OneOf,
    Section,
    Shape,
    ShapeError,
    Str,
    StrMap,
    spec,
)


class _Demo(Section):
    count: int = spec(Int(ge=1))
    ratio: float | None = spec(Float(gt=0, le=1), None)
    mode: str = spec(OneOf(("a", "b", "c")), "a", nullable=False)
    tags: list[str] = spec(ListOf(Str()), [], nullable=False)
    pair: list[float] | None = spec(ListOf(Float(ge=0), min_length=2, max_length=2), None)
    env: dict[str, str] = spec(StrMap(), {}, nullable=False)
    size: int | str | None = spec(IntOrStr(), None)


def _types(errors: list[ShapeError]) -> list[tuple[str, tuple[str | int, ...]]]:
    return [(e.type, e.loc) for e in errors]


# ---------------------------------------------------------------------- scalar shapes


@pytest.mark.parametrize(
    ("shape", "value", "expected", "error"),
    [
        # Strict ints: no bool, no float (even 2.0), no numeric string.
        (Int(), 3, 3, None),
        (Int(), True, None, "int_type"),
        (Int(), 2.0, None, "int_type"),
        (Int(), "8", None, "int_type"),
        (Int(ge=1), 0, None, "greater_than_equal"),
        (Int(ge=0, le=3), 4, None, "less_than_equal"),
        # Floats take ints (stored as float) but not bools or strings.
        (Float(), 2, 2.0, None),
        (Float(), 0.5, 0.5, None),
        (Float(), False, None, "float_type"),
        (Float(), "1e-3", None, "float_type"),
        (Float(gt=0), 0, None, "greater_than"),
        (Float(gt=0, le=1), math.nan, None, "less_than_equal"),  # NaN fails every bound
        (Float(ge=0), math.inf, math.inf, None),
        (Str(), "x", "x", None),
        (Str(), 3, None, "string_type"),
        (Str(pattern=r"^[a-z]+$"), "a b", None, "string_pattern_mismatch"),
        (Bool(), False, False, None),
        (Bool(), 1, None, "bool_type"),
        (Bool(), "true", None, "bool_type"),
        (OneOf(("x", "y")), "y", "y", None),
        (OneOf(("x", "y")), "z", None, "literal_error"),
        (OneOf(("x", "y")), None, None, "literal_error"),
        (IntOrStr(), 5, 5, None),
        (IntOrStr(), "6GiB", "6GiB", None),
        (IntOrStr(), 1.5, None, "int_or_string_type"),
        (IntOrStr(), True, None, "int_or_string_type"),
    ],
)
def test_scalar_shapes(shape: Shape, value: object, expected: object, error: str | None) -> None:
    checked, errors = shape.check(value, ("k",))
    if error is None:
        assert errors == []
        assert checked == expected and type(checked) is type(expected)
    else:
        assert checked is None
        assert _types(errors) == [(error, ("k",))]
        assert errors[0].input is value


def test_messages_use_pydantic_wording() -> None:
    """jobfile rewrites "Input should be" to "must be"; the bound and choices are spelled out."""
    assert Int(ge=1).check(0, ())[1][0].msg == "Input should be greater than or equal to 1"
    assert Float(gt=0).check(-1.0, ())[1][0].msg == "Input should be greater than 0"
    assert Float(le=0.5).check(1.0, ())[1][0].msg == "Input should be less than or equal to 0.5"
    literal = OneOf(("none", "optimizer", "all")).check("cpu", ())[1][0]
    assert literal.msg == "Input should be 'none', 'optimizer' or 'all'"
    assert literal.ctx["expected"] == "'none', 'optimizer' or 'all'"


# ---------------------------------------------------------------------- containers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], []),
        (["a", "b"], []),
        ("a b", [("list_type", ("k",))]),
        (("a",), [("list_type", ("k",))]),  # strict: a tuple is not a list
        (["a", 1, None], [("string_type", ("k", 1)), ("string_type", ("k", 2))]),
    ],
)
def test_list_items_are_located(value: object, expected: list[tuple[str, tuple[object]]]) -> None:
    assert _types(ListOf(Str()).check(value, ("k",))[1]) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([1, 2], []),
        ([1], [("too_short", ("k",))]),
        ([1, 2, 3], [("too_long", ("k",))]),
        ([-1, 2], [("greater_than_equal", ("k", 0))]),
        ([-1], [("greater_than_equal", ("k", 0))]),  # item errors first, as pydantic does
    ],
)
def test_list_length(value: object, expected: list[tuple[str, tuple[object]]]) -> None:
    shape = ListOf(Float(ge=0), min_length=2, max_length=2)
    checked, errors = shape.check(value, ("k",))
    assert _types(errors) == expected
    assert (checked == [1.0, 2.0]) if not expected else checked is None


def test_str_map_locates_bad_keys_and_values() -> None:
    checked, errors = StrMap().check({"A": "1", 2: "x", "B": None}, ("env",))
    assert checked is None
    assert _types(errors) == [
        ("string_type", ("env", 2, "[key]")),
        ("string_type", ("env", "B")),
    ]
    assert _types(StrMap().check(["A=1"], ("env",))[1]) == [("dict_type", ("env",))]


# ---------------------------------------------------------------------- sections


def test_section_defaults_and_fields_set() -> None:
    """Absent keys get their defaults and stay out of fields_set; an explicit null is kept
    apart from absence (for flags:, null means "never pass that flag")."""
    demo, errors = _Demo.check({"count": 2, "ratio": None})
    assert errors == [] and demo is not None
    assert (demo.count, demo.ratio, demo.mode, demo.tags, demo.env) == (2, None, "a", [], {})
    assert demo.fields_set == frozenset({"count", "ratio"})
    other, _ = _Demo.check({"count": 1})
    assert other is not None
    assert other.tags is not demo.tags  # each instance gets its own default list


def test_section_reports_every_error_in_order() -> None:
    """Declared keys in declaration order, then unknown keys in file order; nothing stops at
    the first error."""
    demo, errors = _Demo.check(
        {"zz": 1, "ratio": 2.0, "mode": None, "tags": "x", 7: "y", "count": True}
    )
    assert demo is None
    assert _types(errors) == [
        ("int_type", ("count",)),
        ("less_than_equal", ("ratio",)),
        ("literal_error", ("mode",)),  # mode is not nullable: null is not a choice
        ("list_type", ("tags",)),
        ("extra_forbidden", ("zz",)),
        ("invalid_key", (7,)),
    ]


def test_section_missing_and_not_a_mapping() -> None:
    assert _types(_Demo.check({})[1]) == [("missing", ("count",))]
    _, errors = _Demo.check(["count", 1])
    assert _types(errors) == [("model_type", ())]
    assert "_Demo" in errors[0].msg


def test_section_names_and_schema() -> None:
    assert _Demo.names() == ("count", "ratio", "mode", "tags", "pair", "env", "size")
    schema = _Demo.json_schema()
    assert schema["required"] == ["count"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["count"] == {"type": "integer", "minimum": 1}
    assert schema["properties"]["mode"] == {
        "enum": ["a", "b", "c"],
        "type": "string",
        "default": "a",
    }
    ratio = schema["properties"]["ratio"]["anyOf"][0]
    assert ratio == {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    assert schema["properties"]["pair"]["anyOf"][0]["minItems"] == 2
