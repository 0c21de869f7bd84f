"""A fake vendor toolchain for the ``external`` backend's tests.

As a script it is the "compiler": ``python fake_vendor.py ONNX ARTIFACT`` copies the ONNX file to
the artifact path (standard library only, so it starts fast). ``--fail`` makes it print an error
on stderr and exit 3; ``--sleep S`` makes it wait first. As a module it is the "runtime":
:func:`load` wraps the artifact in an onnxruntime session; :func:`load_callable` returns a plain
function instead of an object.
"""

from __future__ import annotations

import shutil
import sys
import time

__version__ = "1.2.3"

LOADED: list[str] = []  # artifact paths loaded, for the tests


class FakeRuntime:
    def __init__(self, artifact: str) -> None:
        import onnxruntime as ort

        with open(artifact, "rb") as f:
            header = f.read(len(b"FAKEVENDOR\n"))
            if header != b"FAKEVENDOR\n":
                raise ValueError(f"{artifact} was not built by the fake compiler")
            blob = f.read()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.closed = False

    def run(self, feeds):
        return dict(zip(self.names, self.sess.run(None, feeds), strict=True))

    def close(self) -> None:
        self.closed = True


def load(artifact: str) -> FakeRuntime:
    LOADED.append(artifact)
    return FakeRuntime(artifact)


def load_callable(artifact: str):
    rt = FakeRuntime(artifact)
    return lambda feeds: [a for a in rt.sess.run(None, feeds)]  # a list, in output order


def main(argv: list[str]) -> int:
    args = list(argv)
    if "--sleep" in args:
        i = args.index("--sleep")
        time.sleep(float(args[i + 1]))
        del args[i : i + 2]
    if "--fail" in args:
        print("fake-vendor: loading model", file=sys.stderr)
        print("fake-vendor: error: op 'Gemm' is not supported on this NPU", file=sys.stderr)
        return 3
    src, dst = args
    with open(dst, "wb") as out, open(src, "rb") as f:
        out.write(b"FAKEVENDOR\n")
        shutil.copyfileobj(f, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
