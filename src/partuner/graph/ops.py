"""ONNX op type names: the one check that a name a user wrote (a ``--fuse`` pattern, a units
file's ``ops`` list) is an op type ONNX defines, with the close names when it is not."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable

__all__ = ["onnx_op_types", "op_type_problem"]


@functools.cache
def onnx_op_types() -> frozenset[str]:
    """The op types of every operator set ``onnx`` defines (``ai.onnx``, ``ai.onnx.ml``...)
    and of onnxruntime's own (``com.microsoft``: FusedConv, QuickGelu..., which exported and
    optimised models hold)."""
    import onnx.defs

    names = {s.name for s in onnx.defs.get_all_schemas()}
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

        names |= {s.name for s in ort_c.get_all_operator_schema()}
    except (ImportError, AttributeError, RuntimeError):  # an onnxruntime without schemas
        pass
    return frozenset(names)


def op_type_problem(name: str, also: Iterable[str] = ()) -> str | None:
    """Why ``name`` is not an ONNX op type, with the close op types (and close names of
    ``also``, other names the caller accepts); None when it is one.

    Parameters
    ----------
    name : str
        An op type as the user wrote it, e.g. ``Relu``.
    also : iterable of str
        Other names the caller accepts (NEST-C's node kinds), offered as close matches too.

    Returns
    -------
    str or None
        ``"'Rleu' is not an ONNX op type (did you mean 'Relu'?)"``, or None.

    Examples
    --------
    >>> op_type_problem("Relu") is None
    True
    >>> op_type_problem("Rleu")
    "'Rleu' is not an ONNX op type (did you mean 'Relu' or 'PRelu'?)"
    >>> op_type_problem("Xyzzy")
    "'Xyzzy' is not an ONNX op type"
    """
    known = onnx_op_types()
    if name in known:
        return None
    close = difflib.get_close_matches(name, sorted(known | set(also)), n=3)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return f"{name!r} is not an ONNX op type{hint}"
