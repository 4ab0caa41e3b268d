"""A ``CallSignature`` as JSON (the artifact's manifest): parameters with their kinds and
defaults, the example call's slots and constants, and the output's pytree spec (torch's
``treespec_dumps``, which names each container type: a type it cannot name, such as an
unregistered class, is an ``ArtifactError`` at save)."""

from __future__ import annotations

from typing import Any

from ..bridge.signature import EMPTY, CallSignature, Opaque, Param
from ..errors import ArtifactError


def signature_json(s: CallSignature) -> dict[str, Any]:
    from torch.utils._pytree import treespec_dumps

    try:
        out = None if s.out_spec is None else treespec_dumps(s.out_spec)
    except Exception as err:   # torch raises several types for an unnamed container
        raise ArtifactError(f"the module's output structure cannot be saved: {err}") from None
    return {"params": None if s.params is None else [_param(p) for p in s.params],
            "slots": list(s.slots), "consts": [list(c) for c in s.consts],
            "positional": s.positional, "out_spec": out}


def signature_of(d: dict[str, Any]) -> CallSignature:
    from torch.utils._pytree import treespec_loads

    params = None if d["params"] is None else tuple(
        Param(p["name"], int(p["kind"]), _default(p)) for p in d["params"])
    out = None if d["out_spec"] is None else treespec_loads(d["out_spec"])
    return CallSignature(params, tuple(d["slots"]), tuple((n, v) for n, v in d["consts"]),
                         int(d["positional"]), out)


def _param(p: Param) -> dict[str, Any]:
    out: dict[str, Any] = {"name": p.name, "kind": p.kind}
    if isinstance(p.default, Opaque):
        out["opaque"] = p.default.text
    elif p.default is not EMPTY:
        out["default"] = p.default
    return out


def _default(p: dict[str, Any]) -> Any:
    if "opaque" in p:
        return Opaque(p["opaque"])
    return p["default"] if "default" in p else EMPTY
