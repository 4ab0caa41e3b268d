"""How a call binds to a compiled module, as Python binds it to the module's ``forward``.

A compile sees one example call, ``module(*args, **kwargs)``. Its arguments bind to ``forward``'s
parameters as *slots*: a parameter's name, ``{name}_{j}`` for the j-th argument a ``*args``
parameter takes (as torch.export names it), a keyword's own name for one a ``**kwargs`` parameter
takes. Tensor slots are the traced inputs (in the example call's order, which is export's: the
positional arguments, then the keywords as given); every other slot (``None``, a bool, an int, a
float, a string) is a constant of the trace. A later call binds the same way: its tensors fill the
traced inputs by slot, and a non-tensor argument must equal what the compile saw (its example
value, else the parameter's default): another value would be another program.

``CallSignature`` also holds the output's pytree structure (export's ``out_spec``), so a call
returns what the module returns: a tensor, a tuple, a dict, an HF ``ModelOutput``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import ArgumentError

__all__ = ["Param", "CallSignature", "params_of", "bind_slots", "SIMPLE"]

_P = inspect.Parameter
SIMPLE = (type(None), bool, int, float, str)
"""The non-tensor argument types a compile takes as constants (and an artifact can store)."""


@dataclass(frozen=True)
class Opaque:
    """A parameter default that is not a simple value, by its ``repr``: a call passing the
    parameter cannot be compared with it, so it must pass what the compile passed."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Param:
    """One parameter of ``forward``: name, ``inspect.Parameter`` kind, and default (``EMPTY``:
    none; an ``Opaque`` for one that is no simple value)."""

    name: str
    kind: int
    default: Any

    @property
    def required(self) -> bool:
        return self.default is EMPTY and self.kind in (_P.POSITIONAL_ONLY,
                                                        _P.POSITIONAL_OR_KEYWORD,
                                                        _P.KEYWORD_ONLY)


class _Empty:
    def __repr__(self) -> str:
        return "<no default>"

    def __reduce__(self):
        return "EMPTY"


EMPTY = _Empty()


def params_of(fn: Callable) -> tuple[Param, ...] | None:
    """``fn``'s parameters (``None`` when Python cannot tell them: a builtin, a C function)."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(Param(p.name, int(p.kind), EMPTY if p.default is _P.empty else
                       p.default if isinstance(p.default, SIMPLE) else
                       Opaque(_short_repr(p.default))) for p in ps)


def bind_slots(params: Sequence[Param] | None, args: Sequence[Any], kwargs: Mapping[str, Any]
               ) -> dict[str, Any]:
    """``args`` and ``kwargs`` bound to ``params`` as Python binds them: {slot: value}, the
    positional arguments first, then the keywords as given; ``ArgumentError`` naming what does
    not bind (too many positional arguments, an unknown or repeated keyword, a missing required
    parameter). With ``params`` None, positional arguments only, named ``input{i}``."""
    if params is None:
        if kwargs:
            raise ArgumentError(f"keyword argument(s) {sorted(kwargs)}: the module's parameters "
                                f"cannot be read, so it takes positional arguments only")
        return {f"input{i}": a for i, a in enumerate(args)}
    positional = [p for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
    var = next((p for p in params if p.kind == _P.VAR_POSITIONAL), None)
    var_kw = next((p for p in params if p.kind == _P.VAR_KEYWORD), None)
    out = {p.name: a for p, a in zip(positional, args)}
    extra = args[len(positional):]
    if extra and var is None:
        raise ArgumentError(f"takes at most {len(positional)} positional argument(s) "
                            f"({', '.join(p.name for p in positional)}), got {len(args)}")
    out.update((f"{var.name}_{j}", a) for j, a in enumerate(extra))
    named = {p.name: p for p in params if p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)}
    for key, value in kwargs.items():
        p = named.get(key)
        if p is None and var_kw is None:
            raise ArgumentError(f"unexpected keyword argument {key!r} (parameters: "
                                f"{', '.join(named)})")
        if p is not None and p.kind == _P.POSITIONAL_ONLY:
            raise ArgumentError(f"argument {key!r} is positional-only, passed as keyword")
        if key in out:
            raise ArgumentError(f"argument {key!r} given twice (by position and keyword)")
        out[key] = value
    missing = [p.name for p in params if p.required and p.name not in out]
    if missing:
        raise ArgumentError(f"missing required argument(s) {', '.join(map(repr, missing))}")
    return out


@dataclass(frozen=True)
class CallSignature:
    """A compiled module's call interface. ``params``: ``forward``'s (None: positional only);
    ``slots``: the example call's, in its order (the tensor ones are the traced inputs, in graph
    order); ``consts``: its other slots and their values; ``positional``: how many slots it
    passed by position; ``out_spec``: the output's ``TreeSpec`` (None: one tensor). Picklable."""

    params: tuple[Param, ...] | None
    slots: tuple[str, ...]
    consts: tuple[tuple[str, Any], ...] = ()
    positional: int = -1
    out_spec: Any = None

    def __post_init__(self):
        consts = dict(self.consts)
        object.__setattr__(self, "inputs", tuple(s for s in self.slots if s not in consts))
        if self.positional < 0:
            object.__setattr__(self, "positional", len(self.slots))
        object.__setattr__(self, "_simple", not consts and self.positional == len(self.slots))
        object.__setattr__(self, "_keywords", frozenset(self.slots[self.positional:])
                           if not consts else None)
        object.__setattr__(self, "_flat_tuple", _flat_tuple(self.out_spec))

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
        """A call's tensors, one per traced input in graph order; ``ArgumentError`` naming the
        argument at fault."""
        if not kwargs and self._simple and len(args) == len(self.slots):
            return args   # the common call: what the compile passed, by position
        if self._keywords is not None and len(args) == self.positional and \
                kwargs.keys() == self._keywords:   # passed as the compile passed them
            slots = {**dict(zip(self.slots, args)), **kwargs}
            return tuple(slots[name] for name in self.inputs)
        try:
            slots = bind_slots(self.params, args, kwargs)
        except ArgumentError as err:
            raise ArgumentError(f"{err} (compiled for {self!r})") from None
        consts = dict(self.consts)
        for name, value in slots.items():
            if name in consts:
                _same(name, value, consts[name], "the compile's example passed")
            elif name not in self.inputs:
                if isinstance(value, torch.Tensor):
                    raise ArgumentError(f"argument {name!r} is a tensor, but the compile's "
                                        f"example did not pass it (compiled for {self!r}): "
                                        f"compile with an example for it")
                _same(name, value, self._default(name), "compiled with its default")
        for name, value in consts.items():
            if name not in slots:
                _same(name, self._default(name), value, "the compile's example passed")
        missing = [name for name in self.inputs if name not in slots]
        if missing:
            raise ArgumentError(f"missing input(s) {', '.join(map(repr, missing))}: traced "
                                f"with an example tensor each (compiled for {self!r})")
        return tuple(slots[name] for name in self.inputs)

    def example_call(self, tensors: Sequence[torch.Tensor]) -> tuple[tuple, dict]:
        """``(args, kwargs)`` of a call like the compile's example, with ``tensors`` (one per
        traced input, in graph order) in the inputs' places."""
        values = {**dict(self.consts), **dict(zip(self.inputs, tensors))}
        args = tuple(values[s] for s in self.slots[:self.positional])
        return args, {s: values[s] for s in self.slots[self.positional:]}

    def unflatten(self, outs: Sequence[torch.Tensor]) -> Any:
        """The module's output structure around the compiled outputs."""
        if self.out_spec is None:
            return outs[0]
        if self._flat_tuple:   # the common several-output case, without the pytree walk
            return tuple(outs)
        from torch.utils._pytree import tree_unflatten

        return tree_unflatten(list(outs), self.out_spec)

    def _default(self, name: str) -> Any:
        p = next((p for p in self.params or () if p.name == name), None)
        return p.default if p is not None else EMPTY

    def __repr__(self) -> str:
        """As ``inspect`` prints ``forward``'s signature, over the parameters the example call
        passed: ``(x, y, scale=None, *, bias=None)``; a constant with its compiled value."""
        consts = dict(self.consts)
        if self.params is None:
            return "(" + ", ".join(self.slots) + ", /)"
        parts: list[str] = []
        for j, p in enumerate(self.params):
            if p.kind == _P.VAR_POSITIONAL:
                names = [s for s in self.slots if s.startswith(p.name + "_") and
                         s[len(p.name) + 1:].isdigit()]
            elif p.kind == _P.VAR_KEYWORD:
                named = {q.name for q in self.params}
                names = [s for s in self.slots[self.positional:] if s not in named]
            else:
                names = [p.name] if p.name in self.slots else []
            if p.kind == _P.KEYWORD_ONLY and names and "*" not in parts:
                parts.append("*")
            for n in names:
                parts.append(f"{n}={consts[n]!r}" if n in consts else
                             n if p.default is EMPTY else f"{n}={p.default!r}")
            if p.kind in (_P.POSITIONAL_ONLY, _P.VAR_POSITIONAL) and names and \
                    (j + 1 == len(self.params) or
                     self.params[j + 1].kind not in (_P.POSITIONAL_ONLY, _P.VAR_POSITIONAL)):
                parts.append("/")
        return f"({', '.join(parts)})"


def _flat_tuple(spec: Any) -> bool:
    """``spec`` is a plain tuple of tensors."""
    from torch.utils._pytree import tree_structure

    return spec is not None and spec == tree_structure((0,) * spec.num_leaves)


def _same(name: str, value: Any, compiled: Any, what: str) -> None:
    if compiled is EMPTY:
        raise ArgumentError(f"argument {name!r} = {_short_repr(value)}: the compile's example "
                            f"did not pass it (compile with it)")
    if isinstance(compiled, Opaque):
        raise ArgumentError(f"argument {name!r} = {_short_repr(value)}: {what} {compiled!r}, "
                            f"which a call cannot be compared with (pass it only if the "
                            f"compile did)")
    if type(value) is not type(compiled) or value != compiled:
        raise ArgumentError(f"argument {name!r} = {_short_repr(value)}, but {what} "
                            f"{_short_repr(compiled)}: non-tensor arguments are constants of "
                            f"the compiled program (compile again for another value)")


def _short_repr(x: Any, limit: int = 40) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 3] + "..."
