"""The README's worked example: `partuner tune zoo:googlenet` on this machine's default units.

Runs the command line exactly as a user would (fresh profile store, fresh output folder) and
prints what it printed, so the README's example output is reproducible:

    python benchmarks/example_tune.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer timed runs")
    args = ap.parse_args()
    work = temp_dir("partuner-example-")
    exe = Path(sys.executable).with_name("partuner")
    cmd = [
        str(exe),
        "tune",
        "zoo:googlenet",
        "--db",
        str(work / "profiles.db"),
        "-o",
        "partuner-out/googlenet",
        "--quiet",
    ]
    if args.quick:
        cmd += ["--repeat", "10"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, check=False)
    text = proc.stdout.replace(str(work) + "/", "")
    print("```")
    print("$ partuner tune zoo:googlenet")
    print(text.rstrip())
    print("```")
    write_result(
        "example",
        {
            "machine": machine(),
            "quick": args.quick,
            "command": cmd[1:],
            "returncode": proc.returncode,
            "stdout": text,
            "stderr": proc.stderr[-2000:],
        },
    )
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
