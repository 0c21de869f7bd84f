"""Opset conversion for exported partitions: ``onnx.version_converter``, one version at a time,
with a schema check where it has no adapter.

``onnx.version_converter`` stops at the first op it has no adapter for, and it has none for many
ops whose newer version only widened the types it takes (``Relu``, ``Add`` and the other
arithmetic ops at opset 14 added bfloat16): converting any model with a ``Relu`` from opset 14 or
later down to 13 or earlier, the opsets vendor compilers most often ask for, failed. So
:func:`convert_opset` steps one version at a time; a step the converter refuses is taken by
:func:`_schema_step`, which keeps a node as it is only where the older version's schema takes it
unchanged: the same op exists there, the node's inputs and outputs fit its counts, every
attribute exists there (an attribute added later is dropped only when set to its default, the
older behaviour by ONNX's rule for new attributes), and every input and output type is one the
older version allows; Clip-11's constant ``min``/``max`` inputs become Clip-6's attributes.
Anything else names the node and stops. The converter also drops a
model's local functions: their calls are inlined first (``onnx.inliner``). The result is checked
with ``onnx.checker`` (full, with type and shape inference) at the target opset.
"""

from __future__ import annotations

import copy

import onnx
from onnx import helper

from partuner.errors import InvalidModelError
from partuner.graph.subgraphs import all_graphs

__all__ = ["convert_opset"]


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain (``ai.onnx``) opset, 0 if it imports none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text.split("failed: ")[-1].replace("$", "")[:200]  # drop the C++ assertion prefix


def convert_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """The model with its default-domain opset converted to ``version``; raises
    InvalidModelError when ``version`` is out of range or an op cannot be converted.

    Examples
    --------
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> default_opset(convert_opset(m, 11))
    11
    """
    newest = onnx.defs.onnx_opset_version()
    if not 7 <= version <= newest:
        raise InvalidModelError(f"--opset {version} is out of range; use 7 to {newest}")
    source = default_opset(model)
    if source == version:
        return copy.deepcopy(model)
    from onnx import version_converter

    if model.functions:  # the converter drops local functions: their bodies go inline first
        model = _inlined(model, source, version)

    try:
        return version_converter.convert_version(model, version)
    except Exception as exc:
        first = exc
    if source < version:  # up-conversion: the converter's adapters or nothing
        raise _cannot(model, source, version, _first_line(first))
    m = model
    for v in range(source - 1, version - 1, -1):
        try:
            m = version_converter.convert_version(m, v)
        except Exception as exc:
            m = _schema_step(m, v, _first_line(exc), source, version)
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as exc:
        raise _cannot(model, source, version, _first_line(exc)) from None
    return m


def _inlined(model: onnx.ModelProto, source: int, version: int) -> onnx.ModelProto:
    """``model`` with its local functions' calls replaced by their bodies."""
    import onnx.inliner

    try:
        out = onnx.inliner.inline_local_functions(model, convert_version=True)
    except Exception as exc:
        why = f"inlining its local functions failed: {_first_line(exc)}"
        raise _cannot(model, source, version, why) from None
    del out.functions[:]
    return out


def _cannot(model: onnx.ModelProto, source: int, version: int, why: str) -> InvalidModelError:
    return InvalidModelError(
        f"cannot convert {model.graph.name!r} from opset {source} to {version}: {why}; "
        "choose an opset closer to the model's"
    )


def _value_types(model: onnx.ModelProto) -> dict[str, str]:
    """Value name -> its type as schemas spell it (``tensor(float)``), where inference knows."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # the final check reports what is wrong
        inferred = model
    out: dict[str, str] = {}
    for g in all_graphs(inferred.graph):
        for vi in [*g.input, *g.output, *g.value_info]:
            t = vi.type
            if t.HasField("tensor_type") and t.tensor_type.elem_type:
                out[vi.name] = _tensor(t.tensor_type.elem_type)
        for init in g.initializer:
            out[init.name] = _tensor(init.data_type)
    return out


def _tensor(elem: int) -> str:
    return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"


def _schema_step(
    model: onnx.ModelProto, to: int, why: str, source: int, target: int
) -> onnx.ModelProto:
    """``model`` (at opset ``to + 1``) at opset ``to``, its nodes unchanged but for attributes
    added after ``to`` and set to their defaults; raises where a node does not fit the older
    schema (``why``: the converter's reason for refusing the step)."""
    m = copy.deepcopy(model)
    types = _value_types(m)
    for g in all_graphs(m.graph):
        for node in g.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "Clip" and to == 10:
                _clip_bounds_to_attributes(node, g)
            problem = _fit(node, to + 1, to, types)
            if problem:
                raise _cannot(
                    model, source, target, f"{why} (node {node.name or node.op_type!r}: {problem})"
                )
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = to
    return m


def _clip_bounds_to_attributes(node: onnx.NodeProto, g: onnx.GraphProto) -> None:
    """Clip-11's ``min``/``max`` inputs, where they are scalar initializers of ``g``, as
    Clip-6's attributes (ReLU6 in MobileNets); otherwise the node is left for :func:`_fit` to
    refuse."""
    from onnx import numpy_helper

    fed = {i.name for i in g.input}  # an initializer that is also an input may be fed
    inits = {t.name: t for t in g.initializer if t.name not in fed}
    bounds = list(node.input[1:3])
    values = {}
    for key, name in zip(("min", "max"), bounds, strict=False):
        if not name:
            continue
        t = inits.get(name)
        # a scalar float stored in the model itself (never read from an external data file)
        external = t is not None and t.data_location == onnx.TensorProto.EXTERNAL
        if t is None or external or t.data_type != onnx.TensorProto.FLOAT or any(t.dims):
            return
        v = numpy_helper.to_array(t)
        if v.size != 1:
            return
        values[key] = float(v.reshape(()))
    del node.input[1:]
    node.attribute.extend(helper.make_attribute(k, v) for k, v in values.items())


def _fit(node: onnx.NodeProto, have: int, to: int, types: dict[str, str]) -> str | None:
    """Why ``node`` (valid at opset ``have``) cannot stay as it is at opset ``to``, or None
    (dropping attributes the older schema lacks and that are set to their defaults)."""
    try:
        new = onnx.defs.get_schema(node.op_type, have, node.domain)
    except Exception:
        return f"{node.op_type} is not an op of opset {have}"
    if new.since_version <= to:
        return None  # the same schema at both versions
    try:
        old = onnx.defs.get_schema(node.op_type, to, node.domain)
    except Exception:
        return f"{node.op_type} does not exist at opset {to}"
    inputs = list(node.input)
    while inputs and not inputs[-1]:
        inputs.pop()
    if not old.min_input <= len(inputs) <= old.max_input:
        return f"{len(inputs)} inputs, opset {to}'s {node.op_type} takes {_span(old, 'input')}"
    if not old.min_output <= len(node.output) <= old.max_output:
        return f"{len(node.output)} outputs, opset {to}'s takes {_span(old, 'output')}"
    keep = []
    for a in node.attribute:
        if a.name in old.attributes:
            keep.append(a)
            continue
        spec = new.attributes.get(a.name)
        default = spec.default_value if spec is not None else None
        value = helper.get_attribute_value(a)
        if default is not None and default.name and value == helper.get_attribute_value(default):
            continue
        implicit = _IMPLICIT.get(a.name)
        if implicit is None or not implicit(value):
            return f"attribute {a.name!r} does not exist at opset {to}"
    kept = {a.name for a in keep}
    missing = [n for n, s in old.attributes.items() if s.required and n not in kept]
    if missing:
        return f"opset {to} requires attribute {missing[0]!r}"
    for names, params in ((inputs, old.inputs), (list(node.output), old.outputs)):
        for i, name in enumerate(names):
            if not name or not params:
                continue
            param = params[min(i, len(params) - 1)]
            allowed = _allowed(old, param.type_str)
            t = types.get(name)
            if t is not None and allowed and t not in allowed:
                return f"{name!r} is {t}, which opset {to}'s {node.op_type} does not take"
    del node.attribute[:]
    node.attribute.extend(keep)
    return None


#: attributes added to an op later whose schema states no default, yet whose doc does: these
#: values are the older version's behaviour (MaxPool-10's and AveragePool-19's dilations)
_IMPLICIT = {"dilations": lambda v: isinstance(v, list) and all(x == 1 for x in v)}


def _span(schema: onnx.defs.OpSchema, what: str) -> str:
    lo, hi = getattr(schema, f"min_{what}"), getattr(schema, f"max_{what}")
    return str(lo) if lo == hi else f"{lo} to {hi}" if hi < 2**31 - 1 else f"{lo} or more"


def _allowed(schema: onnx.defs.OpSchema, type_str: str) -> set[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return set(c.allowed_type_strs)
    return {type_str} if type_str.startswith("tensor(") else set()
