"""Units on a Ray cluster: a unit's sessions live in a Ray actor on the node it names.

A units-file entry may say where it runs::

    ray: {address: auto}        # top level: the cluster (auto | HOST:PORT | ray://HOST:PORT)
    units:
      cpu:  {backend: onnxruntime, threads: 1}
      npu0: {backend: openvino, precision: bf16, ray: {resources: {board-a: 1}}}

``npu0`` is then a :class:`RayUnit`: the backend unit it wraps (``inner``) is built inside a Ray
actor placed by ``resources`` (custom resources a node offers; ``ray start --resources``), and
every runner it prepares lives there; a run sends the inputs through Ray's object store and gets
the outputs back. Profiling runs on the node itself (``partuner.profile.fleet``); what a call
through Ray adds (the round trip, bytes in and out) is measured from here and charged per
partition and per byte.

Ray is an optional extra (``pip install partuner[ray]``), imported only when a units file places
a unit on a cluster. Nothing is started: the cluster must be running (``ray start --head`` on
one machine, ``ray start --address HEAD:6379 --resources '{"board-a": 1}'`` on each board).
Before connecting, the address is probed: a plain TCP connection, then ``ray.init`` in a child
process killed after :data:`PROBE_INIT_S` (Ray itself waits minutes, and ignores SIGTERM, on an
address nobody answers, one that is not Ray's, or a cluster that wants a token it lacks).
"""

from __future__ import annotations

import copy
import logging
import math
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from partuner.errors import UnitError, UnitUnavailableError
from partuner.units.base import Deferred, Runner, Unit, materialize

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = [
    "RayCluster",
    "RayNodeLost",
    "RayPlacement",
    "RayRunner",
    "RayUnit",
    "RayValue",
    "parse_cluster",
    "parse_placement",
]

log = logging.getLogger(__name__)

#: seconds to wait for a unit's actor to be placed and answer (a node offering the resources
#: may still be starting; resources held by other actors never come free)
PLACE_TIMEOUT_S = 60.0
#: seconds a TCP probe of the cluster address may take
PROBE_TIMEOUT_S = 3.0
#: seconds a child process may take to connect to the cluster before it counts as refusing
PROBE_INIT_S = 30.0
INSTALL_HINT = "pip install 'partuner[ray]' (here and on every node)"


class RayNodeLost(UnitUnavailableError):
    """A Ray-placed unit's node (or its actor) went away during a call."""


@dataclass(frozen=True)
class RayPlacement:
    """Where a unit's actor goes: the custom resources (name -> amount) it asks for."""

    resources: Mapping[str, float]

    def spec(self) -> dict[str, Any]:
        return {"resources": dict(self.resources)}

    def describe(self) -> str:
        return ", ".join(f"{k}: {v:g}" for k, v in sorted(self.resources.items()))


def parse_placement(value: object) -> RayPlacement:
    """A unit's ``ray`` option: ``{resources: {NAME: AMOUNT > 0, ...}}``; raises UnitError."""
    example = "ray: {resources: {board-a: 1}}"
    if not isinstance(value, Mapping):
        raise UnitError(f"option 'ray' must be a mapping like {example}, got {value!r}")
    extra = [k for k in value if k != "resources"]
    if extra:
        raise UnitError(f"option 'ray': unknown key {extra[0]!r}; allowed: ['resources']")
    res = value.get("resources")
    if not isinstance(res, Mapping) or not res:
        raise UnitError(
            f"option 'ray' needs 'resources': the custom resources of the node to run on, "
            f"like {example}; got {dict(value)!r}"
        )
    out: dict[str, float] = {}
    for k, v in res.items():
        if not isinstance(k, str) or not k:
            raise UnitError(f"option 'ray': resource names must be strings, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
            raise UnitError(f"option 'ray': resource {k!r} needs an amount > 0, got {v!r}")
        out[k] = float(v)
    return RayPlacement(out)


def parse_cluster(value: object) -> RayCluster:
    """The units file's top-level ``ray`` key: ``{address: auto | HOST:PORT | ray://HOST:PORT}``."""
    if value is None:
        return RayCluster()
    if not isinstance(value, Mapping):
        raise UnitError(f"'ray' must be a mapping like {{address: auto}}, got {value!r}")
    extra = [k for k in value if k != "address"]
    if extra:
        raise UnitError(f"'ray': unknown key {extra[0]!r}; allowed: ['address']")
    addr = value.get("address", "auto")
    if not isinstance(addr, str) or not addr.strip() or any(c.isspace() for c in addr):
        raise UnitError(f"'ray': address must be auto, HOST:PORT or ray://HOST:PORT, got {addr!r}")
    if addr != "auto":
        _host_port(addr)  # checks the form
    return RayCluster(addr)


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnitError(
            f"'ray': address {address!r} must be auto, HOST:PORT or ray://HOST:PORT "
            "(e.g. 10.0.0.5:6379)"
        )
    return host, int(port)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _ray_reason(exc: BaseException) -> str:
    """One line from a Ray error: an exception raised on the node is the traceback's last
    line (``ValueError: ...``), else the message's first."""
    text = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines()]
    text = [ln for ln in text if ln]
    if not text:
        return type(exc).__name__
    raised_there = len(text) > 1 and re.match(r"[\w.]+(Error|Exception)\b", text[-1])
    return (text[-1] if raised_there or "creation task" in text[0] else text[0])[:300]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UnitUnavailableError(
            f"Ray is not installed here ({_first_line(exc)}); {INSTALL_HINT}"
        ) from None
    return ray


@dataclass
class RayCluster:
    """The Ray cluster of a units file; connected on first use (one per process)."""

    address: str = "auto"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _failed: str | None = field(default=None, repr=False, compare=False)

    def connect(self) -> Any:
        """The ``ray`` module, connected to this cluster; raises UnitUnavailableError."""
        ray = _import_ray()
        with self._lock:
            if ray.is_initialized():
                return ray
            if self._failed is not None:  # asked once in this process: the same answer
                raise UnitUnavailableError(self._failed)
            try:
                self._probe()
            except UnitUnavailableError as exc:
                self._failed = str(exc)
                raise
            try:
                ray.init(
                    address=self.address,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
            except Exception as exc:  # ConnectionError, RuntimeError, ...: one line
                raise UnitUnavailableError(
                    f"cannot connect to the Ray cluster at {self.address!r}: {_first_line(exc)}; "
                    "start one (ray start --head) or fix 'ray: {address: ...}' in the units file"
                ) from None
            try:  # Ray's own notices (a node marked dead...) on stdout would break --json
                ray._private.worker._worker_logs_enabled = False
            except AttributeError:
                pass
        return ray

    def _probe(self) -> None:
        """Fail in one line, within seconds, where ``ray.init`` would wait minutes: nothing
        listens at the address (a TCP connect), or what listens is not a Ray cluster that lets
        us in (a connect in a child process, killed after :data:`PROBE_INIT_S`)."""
        if self.address != "auto":
            host, port = _host_port(self.address)
            try:
                socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
            except OSError as exc:
                raise UnitUnavailableError(
                    f"the Ray cluster at {self.address} is unreachable "
                    f"({exc.strerror or _first_line(exc)}); start it (ray start --head) or "
                    "fix 'ray: {address: ...}' in the units file"
                ) from None
        code = (
            "import logging, sys, ray; "
            "ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)"
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, self.address],
                capture_output=True,
                text=True,
                timeout=PROBE_INIT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise UnitUnavailableError(
                f"the Ray cluster at {self.address} did not let us connect within "
                f"{PROBE_INIT_S:g} s: is it a Ray cluster's address (ray start prints it), and "
                "does it ask for a token (set RAY_AUTH_MODE / RAY_AUTH_TOKEN as for `ray start`)?"
            ) from None
        if done.returncode != 0:
            why = [ln.strip() for ln in done.stderr.splitlines() if "Error" in ln.split(":")[0]]
            raise UnitUnavailableError(
                f"cannot connect to the Ray cluster at {self.address!r}: "
                f"{(why[-1] if why else 'ray.init failed')[:300]}; start one (ray start --head) "
                "or fix 'ray: {address: ...}' in the units file"
            )

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's live nodes: ``{"ip", "resources" (custom ones), "id"}``."""
        ray = self.connect()
        out = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = {
                k: v
                for k, v in (n.get("Resources") or {}).items()
                if k not in ("CPU", "GPU", "memory", "object_store_memory")
                and not k.startswith("node:")
                and not k.startswith("accelerator_type:")
            }
            out.append(
                {"ip": n.get("NodeManagerAddress", "?"), "id": n.get("NodeID"), "resources": res}
            )
        return out

    def check_offered(self, unit: str, placement: RayPlacement) -> None:
        """Raise UnitUnavailableError unless some live node offers every resource asked for."""
        nodes = self.nodes()
        for n in nodes:
            if all(n["resources"].get(k, 0.0) >= v for k, v in placement.resources.items()):
                return
        has = sorted({f"{k}: {v:g}" for n in nodes for k, v in n["resources"].items()})
        raise UnitUnavailableError(
            f"unit {unit!r} asks Ray for {{{placement.describe()}}}, which no node of the cluster "
            f"at {self.address} offers (its {len(nodes)} node(s) offer: "
            f"{', '.join(has) if has else 'no custom resources'}); fix its 'ray: {{resources}}' "
            "or start a node with ray start --resources"
        )


_ACTOR_CLASS: Any = None


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        from partuner.units.ray_actor import UnitActor

        _ACTOR_CLASS = ray.remote(UnitActor)
    return _ACTOR_CLASS


class _Remote:
    """The actor of one Ray unit, shared by its views (:meth:`RayUnit.alone`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.actor: Any = None
        self.info: dict[str, Any] | None = None
        self.pending: tuple[Any, Any] | None = None  # (actor, its info ref), not yet waited for


class RayUnit(Unit):
    """A backend unit (``inner``) whose sessions live in a Ray actor on the node its
    ``placement`` names. Its fingerprint is the inner unit's as computed on that node, marked
    ``-ray`` (what a call costs through Ray is part of its measurements)."""

    OPTIONS: Mapping[str, str] = {}

    def __init__(self, inner: Unit, placement: RayPlacement, cluster: RayCluster) -> None:
        # no Unit.__init__: the inner unit checked the options
        if inner.modeled:
            raise UnitError("option 'ray' does not apply to a modeled unit (nothing runs)")
        if inner.remote is not None:
            raise UnitError("options 'ray' and 'remote' exclude each other; keep one")
        self.inner = inner
        self.name = inner.name
        self.backend = inner.backend  # type: ignore[misc]
        # the node's cores: used there to pin the backend, not for conflicts with local units
        self.cores = None
        self.ops = inner.ops
        self.memory_mb = inner.memory_mb
        self.remote = None
        self.precision = inner.precision
        self.options = dict(inner.options)
        self.placement = placement
        self.cluster = cluster
        self._remote = _Remote()
        self._alone = False

    # -- the actor ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start placing this unit's actor without waiting for it, so that several units'
        actors (a worker process each) start at once; errors surface on first use."""
        try:
            ray = self.cluster.connect()
            with self._remote.lock:
                if self._remote.actor is None and self._remote.pending is None:
                    self.cluster.check_offered(self.name, self.placement)
                    self._remote.pending = self._create(ray)
        except UnitUnavailableError:
            pass  # availability() says why

    def _create(self, ray: Any) -> tuple[Any, Any]:
        actor = (
            _actor_class(ray)
            .options(resources=dict(self.placement.resources), num_cpus=0, max_restarts=0)
            .remote(self.name, self.inner.spec())
        )
        return actor, actor.info.remote()

    def _connect(self) -> tuple[Any, Any, dict[str, Any]]:
        """(ray, actor, node info), creating the actor on first use."""
        ray = self.cluster.connect()
        r = self._remote
        with r.lock:
            if r.actor is None:
                if r.pending is None:
                    self.cluster.check_offered(self.name, self.placement)
                    r.pending = self._create(ray)
                (actor, ref), r.pending = r.pending, None
                try:
                    info = ray.get(ref, timeout=PLACE_TIMEOUT_S)
                except ray.exceptions.GetTimeoutError:
                    ray.kill(actor)
                    raise UnitUnavailableError(
                        f"unit {self.name!r}: no Ray node gave it {{{self.placement.describe()}}} "
                        f"within {PLACE_TIMEOUT_S:g} s (other actors, or units of this file, "
                        "hold them); ask for less or give the node more"
                    ) from None
                except ray.exceptions.RayError as exc:
                    raise UnitUnavailableError(
                        f"unit {self.name!r}: its actor could not start on the Ray node "
                        f"({_ray_reason(exc)}); is partuner installed there? {INSTALL_HINT}"
                    ) from None
                r.actor, r.info = actor, info
                if info.get("warning"):
                    log.warning("%s", info["warning"])
            return ray, r.actor, r.info  # type: ignore[return-value]

    def release(self) -> None:
        """End this unit's actor (its runners with it), freeing the resources it holds; the
        next use places a new one."""
        r = self._remote
        with r.lock:
            actor, r.actor, r.info = r.actor, None, None
            if actor is None and r.pending is not None:
                actor, r.pending = r.pending[0], None
        if actor is not None:
            try:
                _import_ray().kill(actor)
            except Exception:  # already gone with its node
                log.debug("killing the actor of %s failed", self.name, exc_info=True)

    def node(self) -> str:
        """The node this unit's actor runs on, in words (``?`` before it was placed)."""
        info = self._remote.info
        if info is None:
            return "?"
        return f"{info['hostname']} ({info['ip']}, node {info['node_id'][:8]})"

    def get(self, ref: Any, what: str) -> Any:
        """``ray.get(ref)`` with Ray's errors as partuner's: a lost node or actor as
        :class:`RayNodeLost` naming the node, a partuner error raised there as itself."""
        ray = _import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None
            raise UnitError(
                f"unit {self.name!r} on Ray node {self.node()}: {what} failed: {_ray_reason(exc)}"
            ) from None
        except ray.exceptions.RayError as exc:
            raise RayNodeLost(
                f"unit {self.name!r}: Ray node {self.node()} was lost during {what} "
                f"({type(exc).__name__}: {_ray_reason(exc)})"
            ) from None

    def submit(self, method: str, *args: Any) -> Any:
        """Call the actor's ``method`` without waiting; returns the object ref."""
        _, actor, _ = self._connect()
        return getattr(actor, method).remote(*args)

    def call(self, method: str, *args: Any) -> Any:
        return self.get(self.submit(method, *args), method)

    # -- the Unit contract ----------------------------------------------------------------

    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover
        return options

    def backend_version(self) -> str:
        info = self._remote.info
        return info["backend_version"] if info else self.inner.backend_version()

    def availability(self) -> tuple[bool, str]:
        try:
            _, _, info = self._connect()
        except UnitUnavailableError as exc:
            return False, str(exc)
        where = f"Ray node {self.node()}, {info['host']}"
        if not info["available"]:
            return False, f"on {where}: {info['reason']}"
        return True, f"{info['reason']} on {where}"

    def fingerprint(self) -> str:
        try:
            _, _, info = self._connect()
        except UnitUnavailableError:
            return self.inner.fingerprint() + "-ray-unplaced"
        return info["fingerprint"] + "-ray"

    def call_route(self) -> str:
        """``ray:here`` when the actor's node is this process's own (inputs handed over in its
        object store), else ``ray:<node ip>`` (inputs copied to that node's store first)."""
        ray, _, info = self._connect()
        if info["node_id"] == ray.get_runtime_context().get_node_id():
            return "ray:here"
        return f"ray:{info['ip']}"

    def prepare(self, model: onnx.ModelProto) -> Runner:
        ok, why = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} is not available: {why}")
        rid, ins, outs = self.call("prepare", model.SerializeToString(), self._alone)
        return RayRunner(self, rid, ins, outs)

    def layer_profile(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> tuple[list[tuple[tuple[str, ...], float]] | None, float | None]:
        got = self.call("layer_profile", model.SerializeToString(), dict(feeds), runs)
        return got[0], got[1]

    def layer_times(
        self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], runs: int = 20
    ) -> list[tuple[tuple[str, ...], float]] | None:
        return self.layer_profile(model, feeds, runs)[0]

    def alone(self) -> Unit:
        view = copy.copy(self)  # shares the actor (``_remote``)
        view._alone = True
        return view

    def supports(self, node: Any, graph: Any = None) -> bool:
        return self.inner.supports(node, graph)

    def _speed_options(self) -> dict[str, Any]:
        return self.inner._speed_options()

    def _fingerprint_tag(self) -> str:
        return self.inner._fingerprint_tag()

    def spec(self) -> dict[str, Any]:
        return {**self.inner.spec(), "ray": self.placement.spec()}

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["ray"] = {**self.placement.spec(), "address": self.cluster.address, "node": self.node()}
        return out


class RayValue(Deferred):
    """An output left in the object store of the node that computed it."""

    def __init__(self, unit: RayUnit, ref: Any, nbytes: int) -> None:
        self.unit, self.ref, self.nbytes = unit, ref, nbytes

    @classmethod
    def fetch_all(cls, values: list[Deferred]) -> list[Any]:
        got = [v for v in values if isinstance(v, RayValue)]
        return got[0].unit.get([v.ref for v in got], "fetching outputs") if got else []


class RayRunner(Runner):
    """A runner living in a Ray unit's actor; ``run`` sends the feeds and gets the outputs;
    ``run_deferred`` leaves the outputs on the node, for another Ray unit to read from there
    (one transfer node to node instead of two through here)."""

    deferred = True

    def __init__(self, unit: RayUnit, rid: int, inputs: tuple, outputs: tuple) -> None:
        self.unit, self.rid = unit, rid
        self.input_names = tuple(inputs)
        self.output_names = tuple(outputs)
        self._closed = False

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return materialize(self.run_deferred(feeds))

    def run_deferred(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        names = list(feeds)
        args = [v.ref if isinstance(v, RayValue) else v for v in feeds.values()]
        _, actor, _ = self.unit._connect()
        refs = actor.run.options(num_returns=1 + len(self.output_names)).remote(
            self.rid, names, *args
        )
        sizes = self.unit.get(refs[0], "a run")  # waits for the run; raises if it failed
        return {
            n: RayValue(self.unit, r, b)
            for n, r, b in zip(self.output_names, refs[1:], sizes, strict=True)
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.unit.submit("close", self.rid)  # not waited for: the node may be gone
        except Exception:  # closing must not hide the error that brought us here
            log.debug("closing a Ray runner failed", exc_info=True)
