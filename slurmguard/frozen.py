"""Frozen record classes for modules on the hook path, without importing dataclasses.

``import dataclasses`` imports inspect (and ast, dis, tokenize behind it): 7-10 ms, and each
``@dataclass`` class costs about 1 ms more to build. The health check reads one node from
Slurm (adapters/slurm/parse.py's NodeInfo) on every HealthCheckInterval of every node, so its
record types are these instead. A :class:`Frozen` subclass behaves as
``@dataclass(frozen=True)`` does: ``==`` and ``hash`` over its compared fields (same class
only), a ``Name(field=value, ...)`` repr, assignment refused, copy and pickle by value;
:meth:`Frozen.replace` is ``dataclasses.replace``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record (as ``dataclasses.FrozenInstanceError``)."""


class Frozen:
    """Base of a frozen record. A subclass lists its fields in ``__slots__``, in the order
    of its ``__init__``'s parameters, sets each in ``__init__`` with ``object.__setattr__``,
    and names in ``_NOT_COMPARED`` the fields left out of ``==`` and ``hash`` and in
    ``_NOT_SHOWN`` those left out of the repr (a dataclass field's ``compare=False``,
    ``repr=False``)."""

    __slots__ = ()
    _NOT_COMPARED: ClassVar[frozenset[str]] = frozenset()
    _NOT_SHOWN: ClassVar[frozenset[str]] = frozenset()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self.__slots__)

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self.__slots__ if f not in self._NOT_COMPARED)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared() == other._compared()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__slots__
                          if f not in self._NOT_SHOWN)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:  # copy, deepcopy and pickle: by the constructor
        return (type(self), self._values())

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (as ``dataclasses.replace``); TypeError for a name that
        is not a field."""
        unknown = set(changes) - set(self.__slots__)
        if unknown:
            raise TypeError(f"{type(self).__qualname__}: no field {sorted(unknown)[0]!r}")
        return type(self)(**{f: changes.get(f, getattr(self, f)) for f in self.__slots__})
