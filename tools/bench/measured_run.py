"""Run ``agentteam-replay`` in this process and write its own CPU time and peak RSS to a file.

``python -m tools.bench.measured_run OUT [replay arguments...]``. A process measured from its
parent with ``wait4`` reports as its peak the resident set it inherited at ``fork`` (the whole
benchmark's), so the peak is read here, by the process itself, after the command returns.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from agentteam_task_bridge.replay._cli import main as replay_main


def main() -> int:
    out, *args = sys.argv[1:]
    code = replay_main(args)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(
        json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss})
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
