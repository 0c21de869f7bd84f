"""Reading an ONNX file safely: ``.onnx`` or ``.onnx.gz``, at most protobuf's 2 GiB, external
data read only from regular files inside the model's folder."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

import onnx

from partuner.errors import InvalidModelError

__all__ = ["MAX_MODEL_BYTES", "read_model_proto"]

# protobuf cannot parse a message of 2 GiB or more: larger files (or gzip streams that
# decompress beyond it) are refused before being read whole.
MAX_MODEL_BYTES = 2**31 - 1
_CHUNK = 1 << 20


def read_model_proto(path: str | Path) -> onnx.ModelProto:
    """Read an ONNX file (``.onnx`` or gzip-compressed ``.onnx.gz``) with its external data.

    Files, and gzip streams once decompressed, larger than :data:`MAX_MODEL_BYTES` are refused
    (decompression stops there); external data must lie inside the model's folder.
    """
    p = Path(path)
    if not p.exists():
        raise InvalidModelError(f"model file not found: {p}")
    if p.is_dir():
        raise InvalidModelError(f"model path is a folder, not an ONNX file: {p}")
    if p.stat().st_size > MAX_MODEL_BYTES:
        raise InvalidModelError(
            f"{p} is larger than {MAX_MODEL_BYTES} bytes, the most an ONNX protobuf can hold; "
            "save its weights as external data"
        )
    try:
        data = _read_capped(p)
        model = onnx.load_model_from_string(data)
    except InvalidModelError:
        raise
    except Exception as exc:  # protobuf raises DecodeError, gzip OSError/EOFError
        raise InvalidModelError(
            f"cannot read {p} as an ONNX model ({type(exc).__name__}); is the file complete "
            "and really ONNX?"
        ) from None
    if len(model.graph.node) == 0 and not model.graph.output:
        raise InvalidModelError(f"{p} holds no ONNX graph (empty or not an ONNX file)")
    _load_external_data(model, p)
    return model


def _read_capped(p: Path) -> bytes:
    with p.open("rb") as f:
        if f.read(2) != b"\x1f\x8b":
            f.seek(0)
            return f.read()
        f.seek(0)
        chunks: list[bytes] = []
        total = 0
        with gzip.GzipFile(fileobj=f) as gz:
            while chunk := gz.read(_CHUNK):
                total += len(chunk)
                if total > MAX_MODEL_BYTES:
                    raise InvalidModelError(
                        f"{p} decompresses to more than {MAX_MODEL_BYTES} bytes, the most an "
                        "ONNX protobuf can hold; is it a gzip bomb? decompress it yourself if not"
                    )
                chunks.append(chunk)
        return b"".join(chunks)


def _all_tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for sub in a.graphs:
                yield from _all_tensors(sub)


def _load_external_data(model: onnx.ModelProto, p: Path) -> None:
    """Load external tensors, reading only regular files inside the model's folder."""
    tensors = [t for t in _all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not tensors:
        return
    folder = p.parent.resolve()
    for t in tensors:
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        shown = repr(loc[:200])
        try:  # a NUL byte, a symlink loop or an over-long name raise here
            target = (folder / loc).resolve()
            inside = bool(loc) and not Path(loc).is_absolute() and target.is_relative_to(folder)
            found = inside and target.is_file()
        except (OSError, ValueError, RuntimeError):
            inside = found = False
        if not inside:
            raise InvalidModelError(
                f"tensor {t.name!r} of {p} keeps its data at {shown}, outside the model's folder "
                f"{folder}; partuner reads external data only next to the model: move it there"
            )
        if not found:
            raise InvalidModelError(
                f"external data file {shown} of tensor {t.name!r} of {p} not found in {folder}; "
                "copy it next to the model"
            )
    try:
        onnx.load_external_data_for_model(model, str(folder))
    except Exception as exc:  # onnx refuses symlinks, short files, bad offsets
        what = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise InvalidModelError(f"cannot load the external data of {p}: {what}") from None
