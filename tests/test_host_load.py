"""Other processes' load while tuning: measured (host_state.OtherLoad) and warned about per workload."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from graph_tuner.host_state import CONTENTION_WARN, OtherLoad
from graph_tuner.tuning import WorkloadSummary
from kernels.workload import Conv2DWorkload


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_busy_process_beside_us_is_seen_and_our_own_work_is_not():
    meter = OtherLoad().start()
    deadline = time.perf_counter() + 0.6
    while time.perf_counter() < deadline:  # this process busy: not "other" load
        pass
    quiet = meter.share()
    spin = "import time\nt = time.perf_counter() + 1.0\nwhile time.perf_counter() < t: pass\n"
    meter = OtherLoad().start()
    subprocess.run([sys.executable, "-c", spin], check=True)  # another process busy for ~1 s of it
    busy = meter.share()
    cores = len(__import__("os").sched_getaffinity(0))
    # One busy core of `cores`, less the interpreter's start-up: well above the warning's threshold.
    assert busy >= 0.6 / cores > CONTENTION_WARN
    # Our own spinning is not counted (other processes may still use a little, hence a margin).
    assert quiet < busy - 0.3 / cores


def test_a_workload_timed_under_load_says_so_and_how_to_mend_it():
    s = WorkloadSummary(Conv2DWorkload((1, 8, 4, 4), (8, 8, 1, 1)), 1, new=3, best_seconds=1e-4, wall_seconds=2.0)
    assert "WARNING" not in s.line(1, 1)  # not measured (off Linux): no claim either way
    s.others_share = CONTENTION_WARN / 2
    assert "WARNING" not in s.line(1, 1)
    s.others_share = 0.45
    line = s.line(1, 1)
    assert "other processes used 45% of the cores" in line and "tune --retime" in line
    s.new = 0  # resumed from the log, nothing timed now: the load did not touch its records
    assert "WARNING" not in s.line(1, 1)
