"""``infra.frozen.frozen``: a frozen slots dataclass whose ``__init__`` sets its slots
directly, with the dataclass's own behaviour."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import InitVar, dataclass, field

import pytest

from infra.frozen import fast_init, frozen


def _pair(body: dict, annotations: dict):
    """The same class twice: as ``@dataclass(frozen=True, slots=True)`` and as ``@frozen``."""
    stock = dataclass(frozen=True, slots=True)(type("Stock", (), {"__annotations__": annotations, **body}))
    fast = frozen(type("Fast", (), {"__annotations__": annotations, **body}))
    return stock, fast


FIELDS = {"seq": "int", "name": "str", "tags": "tuple", "items": "list", "count": "int", "late": "int"}
BODY = {
    "name": "unnamed",
    "tags": (),
    "items": field(default_factory=list),
    "count": field(default=0, init=False),
    "late": field(default=7, kw_only=True),
}


def _state(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {}),
        ((1, "a"), {}),
        ((1, "a", ("x",), [2]), {"late": 3}),
        ((), {"seq": 5, "items": [1], "late": 0}),
        ((2,), {"tags": ("t",)}),
    ],
)
def test_a_record_is_built_as_its_dataclass_is(args, kwargs):
    stock, fast = _pair(BODY, FIELDS)
    a, b = stock(*args, **kwargs), fast(*args, **kwargs)
    assert _state(a) == _state(b)
    assert _parameters(stock) == _parameters(fast)


def _parameters(cls) -> list[tuple]:
    """The ``__init__`` parameters after the instance's: names, kinds and defaults."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in parameters]


def test_a_record_refuses_what_its_dataclass_refuses():
    stock, fast = _pair(BODY, FIELDS)
    for cls in (stock, fast):
        with pytest.raises(TypeError):
            cls()  # seq is required
        with pytest.raises(TypeError):
            cls(1, count=2)  # not an __init__ parameter
        with pytest.raises(TypeError):
            cls(1, "a", (), [], 9)  # late is keyword-only
        with pytest.raises(TypeError):
            cls(1, seq=1)  # given twice


@frozen
class Point:
    x: int
    y: int = 0


def test_a_record_stays_frozen_equal_hashable_and_picklable():
    fast = Point
    point = fast(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.y
    assert point == fast(1, 2) and point != fast(1, 3)
    assert hash(point) == hash(fast(1, 2))
    assert pickle.loads(pickle.dumps(point)) == point
    assert dataclasses.replace(point, y=5) == fast(1, 5)
    assert repr(point) == "Point(x=1, y=2)"
    assert not hasattr(point, "__dict__")


def test_each_record_gets_its_own_default_from_a_factory():
    fast = frozen(
        type("Bag", (), {"__annotations__": {"items": "list"}, "items": field(default_factory=list)})
    )
    one, two = fast(), fast()
    assert one.items == [] and one.items is not two.items
    given = [1]
    assert fast(given).items is given


def test_post_init_runs_after_the_fields_are_set():
    seen = []

    def __post_init__(self):
        seen.append((self.a, self.b))
        if self.a < 0:
            raise ValueError("negative")

    fast = frozen(
        type(
            "Checked",
            (),
            {"__annotations__": {"a": "int", "b": "int"}, "b": 1, "__post_init__": __post_init__},
        )
    )
    fast(2)
    assert seen == [(2, 1)]
    with pytest.raises(ValueError, match="negative"):
        fast(-1)


def test_a_subclass_record_sets_its_parents_slots_too():
    base = frozen(type("Base", (), {"__annotations__": {"a": "int"}}))
    child = frozen(type("Child", (base,), {"__annotations__": {"b": "int"}, "b": 0}))
    made = child(1, 2)
    assert (made.a, made.b) == (1, 2)
    assert isinstance(made, base)


def test_field_names_do_not_clash_with_the_generated_code():
    # Names the generated function might use for itself.
    annotations = {"self": "int", "cls": "int", "_MISSING": "int", "object": "int"}
    fast = frozen(type("Odd", (), {"__annotations__": annotations}))
    made = fast(1, 2, 3, 4)
    assert (made.self, made.cls, made._MISSING, made.object) == (1, 2, 3, 4)
    assert fast(self=1, cls=2, _MISSING=3, object=4) == made


def test_init_var_keeps_the_dataclass_init():
    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: InitVar[int] = 1

        def __post_init__(self, scale):
            object.__setattr__(self, "a", self.a * scale)

    original = WithInitVar.__init__
    assert fast_init(WithInitVar) is WithInitVar and WithInitVar.__init__ is original
    assert WithInitVar(2, 3).a == 6


def test_fast_init_refuses_a_class_it_cannot_serve():
    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    for cls in (NotFrozen, NoSlots):
        with pytest.raises(TypeError, match="frozen slots dataclass"):
            fast_init(cls)


def test_the_routers_per_event_records_are_frozen_with_the_fast_init():
    from routing.engine.decide import Decision
    from routing.engine.evaluate import Evaluation, RouteVerdict
    from routing.engine.handler_pool import CallOutcome
    from routing.engine.settle import RouteOutcome, Settlement
    from routing.extension import EventSnapshot, RouteDecision
    from worklife.views import WorkView

    for cls in (
        Decision,
        WorkView,
        RouteOutcome,
        Settlement,
        Evaluation,
        RouteVerdict,
        EventSnapshot,
        RouteDecision,
        CallOutcome,
    ):
        assert cls.__dataclass_params__.frozen, cls
        assert "__r_self" in inspect.signature(cls.__init__).parameters, cls
