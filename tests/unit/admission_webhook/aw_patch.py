"""Apply the JSON patches the webhook writes (add/replace/test, RFC 6902) to a pod dict, so
unit tests can assert the resulting pod; the integration tests let the real API server
apply them."""

from __future__ import annotations

import copy
from typing import Any


def _tokens(path: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _tokens(op["path"])
        node: Any = out
        for token in parents:
            node = node[int(token)] if isinstance(node, list) else node[token]
        if op["op"] == "test":
            assert node[last] == op["value"], op
        elif isinstance(node, list) and op["op"] == "replace":
            assert last != "-" and 0 <= int(last) < len(node), f"replace of a missing {op['path']}"
            node[int(last)] = copy.deepcopy(op["value"])
        elif isinstance(node, list):
            assert op["op"] == "add", op
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            assert op["op"] in ("add", "replace"), op
            assert op["op"] == "add" or last in node, f"replace of a missing {op['path']}"
            node[last] = copy.deepcopy(op["value"])
    return out
