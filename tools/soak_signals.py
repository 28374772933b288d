"""Run the session-end signal tests many times in a row under load; count the failures.

``python -m tools.soak_signals [--runs 50] [--busy 2] [--stop-at-first]`` starts ``--busy``
niced busy loops (``nice -n 19``), runs ``pytest tests/test_bridge_lifecycle.py -k signal``
``--runs`` times, prints one line per run and a last line ``soak: P passed, F failed of N``, and
exits 1 when any run failed. Each failed run's output is kept in ``soak-signals-<run>.log`` in
the current directory. The busy loops are this process's children, ended by their pid when it
ends (also on Ctrl-C); it starts nothing else. Runs are bounded (``--timeout`` seconds each).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

TESTS = ["tests/test_bridge_lifecycle.py", "-k", "signal"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.soak_signals", description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--busy", type=int, default=2, help="niced busy loops (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--stop-at-first", action="store_true", help="stop at the first failure")
    args = parser.parse_args(argv)
    busy = [
        subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"])
        for _ in range(args.busy)
    ]
    passed = failed = 0
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=args.timeout, check=False
                )
                ok, output = done.returncode == 0, done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                partial = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
                ok, output = False, f"timed out after {args.timeout} s\n{partial or ''}"
            seconds = time.monotonic() - started
            if ok:
                passed += 1
            else:
                failed += 1
                Path(f"soak-signals-{run}.log").write_text(str(output))
            print(f"run {run}: {'passed' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
            if failed and args.stop_at_first:
                break
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(f"soak: {passed} passed, {failed} failed of {passed + failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
