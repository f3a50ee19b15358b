"""Patch semantics of the test Node-API server: JSON merge patch, strategic merge, JSON patch.

Kept faithful to what kube-apiserver does *for Node objects*:

- ``application/merge-patch+json`` (RFC 7386): maps merge recursively, ``null`` deletes a
  key, every list is replaced whole.
- ``application/strategic-merge-patch+json``: like merge patch, except the lists that the
  Node API declares with ``patchStrategy: merge`` are merged item by item on their merge key
  (``status.conditions`` and ``status.addresses`` on ``type``, ``metadata.ownerReferences``
  on ``uid``); an item carrying ``"$patch": "delete"`` removes the matching item and a list
  whose first item is ``{"$patch": "replace"}`` replaces the list. ``spec.taints`` has no
  patch strategy in the Node API, so it is replaced whole, as on a real server.
- ``application/json-patch+json`` (RFC 6902): ``add``, ``remove``, ``replace``, ``test``.

Not implemented (documented in docs/testing.md): ``$retainKeys``, ``$setElementOrder``,
``$deleteFromPrimitiveList``, JSON-patch ``move``/``copy``, apply patches (server-side apply).
"""

from __future__ import annotations

import copy
from typing import Any

# Path (tuple of keys) -> merge key, for the Node lists with patchStrategy "merge".
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
}


class PatchError(Exception):
    """A patch that cannot be applied: ``code`` is the HTTP status to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch for a Node (see the module docstring for what is covered)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise PatchError(422, f"unsupported strategic merge directive {key}")
        sub = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and sub in MERGE_KEYS:
            out[key] = _merge_list(out.get(key) or [], value, MERGE_KEYS[sub])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(out.get(key), value, sub)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    if patch and isinstance(patch[0], dict) and patch[0].get("$patch") == "replace":
        return [copy.deepcopy(p) for p in patch[1:]]
    out = [copy.deepcopy(c) for c in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(422, f"list item without merge key {key!r}: {item!r}")
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(copy.deepcopy(item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, test."""
    if not isinstance(ops, list):
        raise PatchError(400, "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(400, f"malformed json patch operation {op!r}")
        parts = _pointer(op["path"])
        if not parts:
            raise PatchError(422, "json patch on the whole document is not supported")
        parent: Any = doc
        for p in parts[:-1]:
            try:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            except (KeyError, IndexError, ValueError, TypeError):
                raise PatchError(422, f"path {op['path']} does not exist") from None
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            try:
                cur = parent[int(last)] if isinstance(parent, list) else parent[last]
            except (KeyError, IndexError, ValueError, TypeError):
                raise PatchError(422, f"test failed: {op['path']} does not exist") from None
            if cur != op.get("value"):
                raise PatchError(422, f"test failed: {op['path']} is {cur!r}")
        elif kind in ("add", "replace"):
            if "value" not in op:
                raise PatchError(400, f"{kind} needs a value")
            if isinstance(parent, list):
                if last == "-" and kind == "add":
                    parent.append(copy.deepcopy(op["value"]))
                    continue
                try:
                    i = int(last)
                except ValueError:
                    raise PatchError(422, f"bad list index in {op['path']}") from None
                if kind == "add":
                    if i > len(parent):
                        raise PatchError(422, f"index out of range in {op['path']}")
                    parent.insert(i, copy.deepcopy(op["value"]))
                else:
                    if i >= len(parent):
                        raise PatchError(422, f"index out of range in {op['path']}")
                    parent[i] = copy.deepcopy(op["value"])
            elif isinstance(parent, dict):
                if kind == "replace" and last not in parent:
                    raise PatchError(422, f"replace: {op['path']} does not exist")
                parent[last] = copy.deepcopy(op["value"])
            else:
                raise PatchError(422, f"path {op['path']} does not exist")
        elif kind == "remove":
            try:
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            except (KeyError, IndexError, ValueError, TypeError):
                raise PatchError(422, f"remove: {op['path']} does not exist") from None
        else:
            raise PatchError(422, f"json patch operation {kind!r} is not supported by the test server")
    return doc
