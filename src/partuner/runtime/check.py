"""Compare a plan's outputs with the unpartitioned model's, with a rule set by unit precision.

A reference that is not finite (the whole model itself gives NaN or Inf) is compared position by
position: the outputs must be NaN exactly where it is NaN and the same infinity where it is
infinite, and agree elsewhere under the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from partuner.errors import PartunerError

__all__ = ["CheckResult", "OutputCheck", "check_outputs", "tolerance_for"]

# Pass rules: max |got - ref| <= atol + rtol * max|ref|, and cosine >= min_cosine.
_RULES = {
    "f32": {"atol": 1e-5, "rtol": 1e-4, "min_cosine": 0.99999},
    "tf32": {"atol": 1e-3, "rtol": 2e-2, "min_cosine": 0.999},  # f16's 10-bit mantissa
    "f16": {"atol": 1e-3, "rtol": 2e-2, "min_cosine": 0.999},
    "bf16": {"atol": 1e-2, "rtol": 1e-1, "min_cosine": 0.99},
}


def tolerance_for(precisions: Iterable[str]) -> tuple[str, dict[str, float]]:
    """The loosest rule among the units' precisions (a plan is as exact as its least exact unit).

    Examples
    --------
    >>> tolerance_for(["f32", "bf16"])[0]
    'bf16'
    """
    order = ["f32", "tf32", "f16", "bf16"]
    worst = "f32"
    for p in precisions:
        p = p if p in _RULES else "bf16"
        if order.index(p) > order.index(worst):
            worst = p
    return worst, dict(_RULES[worst])


@dataclass(frozen=True)
class OutputCheck:
    name: str
    max_abs: float
    max_rel: float  # max |diff| / max |ref|
    cosine: float
    top1_agree: float | None  # fraction of finite rows whose argmax agrees (None: no such rows)
    passed: bool
    nonfinite_ref: int = 0  # NaN/Inf values in the reference (compared by position)


@dataclass
class CheckResult:
    passed: bool
    precision: str
    rule: str
    outputs: list[OutputCheck] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "precision": self.precision,
            "rule": self.rule,
            "outputs": [asdict(o) for o in self.outputs],
        }


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a64, b64) / (na * nb))


def check_outputs(
    reference: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
    precisions: Iterable[str] = ("f32",),
) -> CheckResult:
    """Compare ``got`` with ``reference`` output by output, by the loosest rule of
    ``precisions`` (the units') and, where the model's outputs are float16, ``f16``'s.

    Examples
    --------
    >>> ref = {"y": np.array([[1.0, 2.0, 3.0]], dtype=np.float32)}
    >>> check_outputs(ref, {"y": ref["y"] + 1e-7}).passed
    True
    >>> check_outputs(ref, {"y": ref["y"][:, ::-1].copy()}).passed
    False
    >>> nan = {"y": np.array([[np.nan, 1.0, 2.0]], dtype=np.float32)}
    >>> r = check_outputs(nan, {"y": nan["y"].copy()})
    >>> r.passed, r.rule.startswith("reference not finite")
    (True, True)
    >>> check_outputs({"y": nan["y"][:, :1]}, {"y": nan["y"][:, :1]}).passed  # NaN alone
    False
    >>> half = {"y": np.array([[1.0, 2.0, 3.0]], dtype=np.float16)}
    >>> check_outputs(half, {"y": half["y"] + np.float16(2e-3)}).precision
    'f16'
    """
    if isinstance(precisions, str):
        raise PartunerError(
            f"precisions must be a list of precision labels, got the string {precisions!r}; "
            f"write [{precisions!r}]"
        )
    lost = [k for k in reference if k not in got]
    if lost:
        raise PartunerError(
            f"output(s) {lost} of the reference are not among the outputs to check "
            f"({sorted(got)}); pass every output the model has"
        )
    half = any(np.asarray(r).dtype == np.float16 for r in reference.values())
    precision, rule = tolerance_for([*precisions, *(["f16"] if half else [])])  # fp16 model
    text = (
        f"{precision}: max|diff| <= {rule['atol']:g} + {rule['rtol']:g}*max|ref| and "
        f"cosine >= {rule['min_cosine']:g}"
    )
    checks = []
    for name, ref in reference.items():
        out = got[name]
        if out.shape != ref.shape:
            checks.append(OutputCheck(name, float("inf"), float("inf"), 0.0, None, False))
            continue
        if ref.dtype.kind not in "fc":
            same = bool(np.array_equal(ref, out))
            checks.append(
                OutputCheck(
                    name,
                    0.0 if same else float("inf"),
                    0.0 if same else float("inf"),
                    1.0 if same else 0.0,
                    None,
                    same,
                )
            )
            continue
        checks.append(_compare_float(name, ref, out, rule))
    bad = {c.name: c.nonfinite_ref for c in checks if c.nonfinite_ref}
    if all(
        r.dtype.kind in "fc" and r.size and not np.isfinite(r).any() for r in reference.values()
    ):
        text = (  # e.g. an all-NaN --input: NaN everywhere "agrees", and says nothing
            "none applies: the reference outputs hold no finite value (NaN/Inf only), nothing "
            "to compare; check with inputs for which the model gives numbers"
        )
        return CheckResult(False, precision, text, [replace(c, passed=False) for c in checks])
    if bad:
        where = ", ".join(f"{n}: {k}" for n, k in bad.items())
        text = (
            f"reference not finite (NaN/Inf values: {where}): NaN/Inf must sit at the same "
            f"positions, elsewhere {text}"
        )
    return CheckResult(all(c.passed for c in checks), precision, text, checks)


def _compare_float(
    name: str, ref: np.ndarray, out: np.ndarray, rule: Mapping[str, float]
) -> OutputCheck:
    """One float output: NaN/Inf positions first, then the rule on the finite values."""
    finite = np.isfinite(ref)
    nonfinite = int(ref.size - np.count_nonzero(finite))
    same_nan = np.array_equal(np.isnan(ref), np.isnan(out))
    inf = np.isinf(ref)
    same_inf = np.array_equal(inf, np.isinf(out)) and np.array_equal(ref[inf], out[inf])
    if not (same_nan and same_inf):  # also: out not finite where ref is
        return OutputCheck(name, float("inf"), float("inf"), 0.0, None, False, nonfinite)
    r64, o64 = ref[finite].astype(np.float64), out[finite].astype(np.float64)
    diff = np.abs(o64 - r64)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(r64).max()) if r64.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    cos = _cosine(r64, o64)
    top1 = None
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        rows = finite.reshape(-1, ref.shape[-1]).all(-1)  # argmax means nothing with a NaN
        if rows.any():
            r = ref.reshape(-1, ref.shape[-1])[rows].argmax(-1)
            o = out.reshape(-1, out.shape[-1])[rows].argmax(-1)
            top1 = float((r == o).mean())
    ok = max_abs <= rule["atol"] + rule["rtol"] * scale and cos >= rule["min_cosine"]
    return OutputCheck(name, max_abs, max_rel, cos, top1, bool(ok), nonfinite)
