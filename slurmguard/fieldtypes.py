"""Config field types: what one key is (type, default, doc, limits).

Below both :mod:`slurmguard.config` (which validates against them) and the check areas in
:mod:`slurmguard.checks` (which declare their ``PARAMS`` with them), so neither imports the
other to say what a key is. Standard library only: it is on the hook path.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["AbsPath", "Bool", "Choice", "Field", "Float", "Int", "IntList", "Schema", "Str",
           "StrList", "Table"]


class Field(NamedTuple):
    """One config key: its type name, default, and an optional extra check."""

    kind: str  # str, int, float, bool, list[str], list[int], choice, path, table
    default: Any
    doc: str = ""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    validate: Callable[[Any], str | None] | None = None  # returns a problem or None


def Str(default: str, doc: str = "") -> Field:
    return Field("str", default, doc)


def AbsPath(default: str, doc: str = "") -> Field:
    return Field("path", default, doc)


def Int(default: int, doc: str = "", minimum: float | None = 0) -> Field:
    return Field("int", default, doc, minimum=minimum)


def Float(default: float, doc: str = "", minimum: float | None = 0) -> Field:
    return Field("float", default, doc, minimum=minimum)


def Bool(default: bool, doc: str = "") -> Field:
    return Field("bool", default, doc)


def StrList(default: Iterable[str], doc: str = "") -> Field:
    return Field("list[str]", list(default), doc)


def IntList(default: Iterable[int], doc: str = "") -> Field:
    return Field("list[int]", list(default), doc)


def Choice(default: str, choices: Iterable[str], doc: str = "") -> Field:
    return Field("choice", default, doc, choices=tuple(choices))


def Table(doc: str = "") -> Field:
    """A free-form table (e.g. a name mapping); values must be strings."""
    return Field("table", {}, doc)


Schema = Mapping[str, "Field | Schema"]
