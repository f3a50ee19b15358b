"""Site modules: a site's own checks, sources and burn-in measurements, loaded one way.

A config key (``checks.site_modules``, ``burnin.site_modules``) lists importable module
names; each module exports tables of ``name -> entry`` (``CHECKS``, ``SOURCES``,
``MEASUREMENTS``) whose entries are objects or ``"module:function"`` targets. A module that
cannot be imported, or that reuses a name already taken (built-in or another site's), is a
config error naming the key: a site must not silently replace a built-in check or
measurement. Standard library only (the hook path loads site checks).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, MutableMapping
from types import ModuleType
from typing import Any

from slurmguard.errors import ConfigError


def load(key: str, names: Iterable[str]) -> Iterator[tuple[str, ModuleType]]:
    """(name, module) for each site module listed under config ``key``, in order."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure of a site's import is its config
            raise ConfigError(f"{key}: cannot import {name!r}: {exc}") from None
        yield name, module


def add(key: str, module_name: str, what: str, table: MutableMapping[str, Any],
        name: str, entry: Any) -> None:
    """Put ``entry`` under ``name`` in ``table``; a name already there is refused."""
    if name in table:
        raise ConfigError(f"{key}: {module_name} redefines {what} {name!r}")
    table[name] = entry


def resolve(target: Any) -> Any:
    """An entry as an object: ``"module:function"`` is imported; anything else is itself."""
    if not isinstance(target, str):
        return target
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"site target {target!r}: expected 'module:function'")
    return getattr(importlib.import_module(module), attr)
