"""What did parse of an inventory with schema errors, so the cross-field rules still run on it
and every problem is reported in one run.

Each field is validated on its own: one that fails keeps its default (None when it has none),
a failing list item or dict entry is dropped from its container, except nodes, which keep
their place (rules name them by index: `nodes[2].rank`).
"""

from __future__ import annotations

import typing
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

M = TypeVar("M", bound=BaseModel)


def partial(model: type[M], data: object) -> M:
    """`model` built from `data` without raising: the fields that validate, defaults else.
    Its model_fields_set names the fields the data gave (valid or not), so a rule can tell a
    field that is absent from one that failed (None for both); when the data is not even a
    mapping, every field counts as given."""
    given = set(data) if isinstance(data, dict) else set(model.model_fields)
    data = data if isinstance(data, dict) else {}
    values = {name: _value(field, data[name]) if name in data else _default(field)
              for name, field in model.model_fields.items()}
    return model.model_construct(_fields_set=given & set(values), **values)


# A field's value is of whatever type the model declares for it: these handle every field
# alike, so to them it is opaque (object).
def _default(field: FieldInfo) -> object:
    return None if field.is_required() else field.get_default(call_default_factory=True)


def _value(field: FieldInfo, raw: object) -> object:
    kind, origin = field.annotation, typing.get_origin(field.annotation)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return partial(kind, raw)
    items = _model_items(kind) if origin is list else None
    if items is not None:
        return [partial(items, item) for item in raw] if isinstance(raw, list) else _default(field)
    # the annotation with its constraints (Annotated[kind, *metadata] when it has any)
    adapter: TypeAdapter[object] = TypeAdapter(field.rebuild_annotation())
    if origin is dict and isinstance(raw, dict):
        return {k: v for k, v in raw.items() if _valid(adapter, {k: v})}
    try:
        return adapter.validate_python(raw)
    except ValidationError:
        return _default(field)


def _model_items(kind: object) -> type[BaseModel] | None:
    """The model a list annotation holds (list[Node] -> Node), if it holds one."""
    args = typing.get_args(kind)
    item = args[0] if args else None
    return item if isinstance(item, type) and issubclass(item, BaseModel) else None


def _valid(adapter: TypeAdapter[object], raw: object) -> bool:
    try:
        adapter.validate_python(raw)
    except ValidationError:
        return False
    return True
