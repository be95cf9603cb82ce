"""The type of a parsed JSON document, as json.loads returns it and json.dumps takes it."""

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
# A document to write (json.dumps): read-only views, so a list[dict[str, JSON]] or a
# dict[str, list[str]] is one (dict and list are invariant in their items, Mapping and
# Sequence are not).
JSONable: TypeAlias = Mapping[str, "JSONable"] | Sequence["JSONable"] | str | int | float | bool | None
