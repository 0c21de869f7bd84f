"""Processing units: the Unit contract, the built-in backends and units files.

Built-in backends: ``onnxruntime`` (measured), ``openvino`` (measured, optional package) and
``modeled`` (computed times, host numerics). Third-party backends register through the
``partuner.units`` entry-point group. See ``docs/units.md`` for the units-file format.
"""

from partuner.units.base import (
    ENTRY_POINT_GROUP,
    Runner,
    Unit,
    backend_names,
    get_backend,
    host_cpu_model,
    make_unit,
    register_backend,
)
from partuner.units.config import (
    DEFAULT_LINK,
    Link,
    UnitSet,
    default_units,
    load_units,
    units_from_mapping,
)
from partuner.units.external_unit import ExternalUnit  # noqa: F401 - registers "external"
from partuner.units.modeled_unit import ModeledUnit
from partuner.units.onnxruntime_unit import OnnxruntimeRunner, OnnxruntimeUnit
from partuner.units.openvino_unit import OpenvinoRunner, OpenvinoUnit

__all__ = [
    "DEFAULT_LINK",
    "ENTRY_POINT_GROUP",
    "Link",
    "ModeledUnit",
    "OnnxruntimeRunner",
    "OnnxruntimeUnit",
    "OpenvinoRunner",
    "OpenvinoUnit",
    "Runner",
    "Unit",
    "UnitSet",
    "backend_names",
    "default_units",
    "get_backend",
    "host_cpu_model",
    "load_units",
    "make_unit",
    "register_backend",
    "units_from_mapping",
]
