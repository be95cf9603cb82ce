"""Typed facts from a fixture's JSON: each dict into the dataclass its field's annotation
names, recursively, so that a misspelt or missing field anywhere in a fixture fails (TypeError
from the dataclass, or facts.UnknownFact)."""

from __future__ import annotations

import dataclasses
import types
import typing

from k3deploy.facts import record


def build(hint, doc):
    """`doc` (JSON: dicts, lists, scalars) as the type `hint` says."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(doc, dict):
        return _dataclass(hint, doc)
    if origin in (typing.Union, types.UnionType):
        return _union(args, doc)
    if origin in (list, tuple) and isinstance(doc, (list, tuple)):
        item = args[0] if args else object
        return origin(build(item, v) for v in doc)
    if origin is dict and isinstance(doc, dict):
        key, value = args if args else (object, object)
        return {k: build(value, v) for k, v in doc.items()}
    return doc


def _dataclass(cls, doc: dict):
    hints = typing.get_type_hints(cls)
    return record(cls, {k: build(hints.get(k, object), v) for k, v in doc.items()})


def _union(args, doc):
    if doc is None:
        return None
    for arg in args:
        if arg is type(None):
            continue
        if dataclasses.is_dataclass(arg) and not isinstance(doc, dict):
            continue
        return build(arg, doc)
    return doc


def facts(step, doc: dict):
    """A step's (class or instance) typed facts from a fixture's dict of them."""
    return build(step.Facts, doc)
