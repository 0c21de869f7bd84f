"""Demo ONNX models built in memory: torchvision-shaped networks with seeded random weights.

Each model is built with ``onnx.helper`` (no torch, no downloads), as an inference export would
look: BatchNorm is folded into the preceding Conv (Conv with bias, then Relu), opset 17, IR
version 9, float32, one input ``input`` of shape ``(1, 3, S, S)`` and one output ``output``.
Weights are drawn from ``numpy.random.default_rng(seed)`` with He-style scales, so the same name,
size and seed always give the same bytes, and activations stay finite. The layer structure,
channels, strides and groups follow the torchvision namesake, and so does the parameter count
once each folded BatchNorm's 2 parameters per channel are counted as the conv's 1 bias
(DenseNet's pre-activation BatchNorms, which no conv precedes, are a Mul and an Add with
torchvision's 2 parameters per channel). Dropout and auxiliary heads are left out.

===============  ==========================================================  =========  =====
name             structure                                                   output     min S
===============  ==========================================================  =========  =====
squeezenet       squeezenet1_1: conv, 3 ceil-mode maxpools, 8 fire modules   (1, 1000)  17
                 (squeeze 1x1, expand 1x1 || expand 3x3, Concat), conv head
googlenet        googlenet: stem convs, 4 ceil-mode maxpools, 9 inception    (1, 1000)  15
                 blocks (1x1 || 1x1->3x3 || 1x1->3x3 || maxpool->1x1), fc
resnet18         resnet18: 8 BasicBlocks with Add shortcuts, 1x1 downsample  (1, 1000)  1
                 conv on the 3 stride-2 blocks, fc
branchy          small synthetic model: 32 nodes, 4 parallel branch groups   (1, 10)    3
                 of 2-3 branches of different lengths
resnet50         resnet50: 16 Bottlenecks (1x1-3x3-1x1, Add), a 1x1          (1, 1000)  1
                 downsample conv on the first block of each stage, fc
mobilenet_v2     mobilenet_v2: 17 inverted residuals (1x1, 3x3 depthwise,    (1, 1000)  1
                 linear 1x1; Add on 10 of them), ReLU6 as Clip(0, 6), fc
shufflenet_v2    shufflenet_v2_x1_0: 16 units (channel Split or two          (1, 1000)  1
                 branches, Concat, channel shuffle), ReduceMean, fc
densenet121      densenet121: dense blocks of 6/12/24/16 BN-ReLU-Conv        (1, 1000)  29
                 layers (BN as Mul+Add), Concats, 3 transitions, fc
inception_v3     inception_v3: stem, InceptionA x3, B, C x4 (1x7/7x1         (1, 1000)  75
                 convs), D, E x2, fc; 299 is its native size
synthetic_large  80 Inception-ResNet-like blocks (2-4 branches of 1-4 small  (1, 10)    1
                 layers, Concat, 1x1 conv, Add): 1206 nodes, a few ms at S=32
===============  ==========================================================  =========  =====

"min S" is the smallest ``image_size`` the model runs at (smaller sizes raise
:class:`~partuner.errors.InputShapeError`). Every model defaults to ``image_size=224``.

Examples
--------
>>> model = build("branchy", image_size=32)
>>> len(model.graph.node), model.graph.input[0].name, model.graph.output[0].name
(32, 'input', 'output')
"""

from __future__ import annotations

import gzip
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import onnx

from partuner.errors import InputShapeError, InvalidModelError
from partuner.graph.zoo_builder import Builder
from partuner.graph.zoo_inception import googlenet, inception_v3
from partuner.graph.zoo_mobile import mobilenet_v2, shufflenet_v2, squeezenet
from partuner.graph.zoo_resnet import densenet121, resnet18, resnet50
from partuner.graph.zoo_synthetic import branchy, synthetic_large

__all__ = ["MIN_IMAGE_SIZE", "NAMES", "OUTPUT_SHAPES", "build", "save"]

# name -> (builder, smallest image size, output shape)
_MODELS: dict[str, tuple[Callable[[Builder], str], int, tuple[int, int]]] = {
    "squeezenet": (squeezenet, 17, (1, 1000)),
    "googlenet": (googlenet, 15, (1, 1000)),
    "resnet18": (resnet18, 1, (1, 1000)),
    "branchy": (branchy, 3, (1, 10)),
    "resnet50": (resnet50, 1, (1, 1000)),
    "mobilenet_v2": (mobilenet_v2, 1, (1, 1000)),
    "shufflenet_v2": (shufflenet_v2, 1, (1, 1000)),
    "densenet121": (densenet121, 29, (1, 1000)),
    "inception_v3": (inception_v3, 75, (1, 1000)),
    "synthetic_large": (synthetic_large, 1, (1, 10)),
}
NAMES: tuple[str, ...] = tuple(_MODELS)
MIN_IMAGE_SIZE: dict[str, int] = {name: m[1] for name, m in _MODELS.items()}
OUTPUT_SHAPES: dict[str, tuple[int, int]] = {name: m[2] for name, m in _MODELS.items()}


def build(name: str, *, image_size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """Build the zoo model ``name`` for ``(1, 3, image_size, image_size)`` inputs.

    Parameters
    ----------
    name : one of :data:`NAMES`.
    image_size : the input's height and width; at least ``MIN_IMAGE_SIZE[name]``.
    seed : seeds the weights; the same arguments always give the same model bytes.

    Returns
    -------
    onnx.ModelProto : checked with ``onnx.checker.check_model(full_check=True)``.

    Raises
    ------
    InvalidModelError : ``name`` is not a zoo model.
    InputShapeError : ``image_size`` is below the model's minimum.
    """
    if name not in _MODELS:
        raise InvalidModelError(f"unknown zoo model {name!r}; known: {list(NAMES)}")
    if int(image_size) < MIN_IMAGE_SIZE[name]:
        raise InputShapeError(
            f"image_size {image_size} is too small for zoo model {name!r}; use "
            f">= {MIN_IMAGE_SIZE[name]}"
        )
    b = Builder(seed, int(image_size))
    _MODELS[name][0](b)
    model = b.model(name, OUTPUT_SHAPES[name][1])
    onnx.checker.check_model(model, full_check=True)
    return model


def save(name: str, path: str | Path, **kw: int) -> Path:
    """Build the zoo model ``name`` (``kw`` as for :func:`build`) and write it to ``path``.

    A path ending in ``.gz`` is gzip-compressed. The file is written to a temporary file in the
    same folder and moved into place, so readers never see a half-written model; its mode follows
    the umask, as a file made with ``open()`` would.
    """
    p = Path(path)
    data = build(name, **kw).SerializeToString()
    if p.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    # Not tempfile.mkstemp: its file is 0600; this one gets the umask's mode, as open() would.
    tmp = p.parent / f".{p.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
