"""One writer per log: a second process is refused before it writes, and a killed holder
frees the log (graph_tuner.log_lock)."""
import os
import signal
import subprocess
import sys

import pytest

from graph_tuner.errors import GraphTunerError
from graph_tuner.log_lock import lock_path, log_lock, writes_log
from graph_tuner.tuning import append_records

REC = {"input": ["llvm", "layout_transform", [], {}], "config": {"index": 0}, "result": [[1e-5], 0, 0, 0]}

# Another process appending one record to the log, as a second `tune` would.
APPEND = ("import sys; from graph_tuner.tuning import append_records; "
          "from graph_tuner.errors import GraphTunerError\n"
          "try:\n    append_records(sys.argv[1], [{'input': ['llvm'], 'config': {}, 'result': [[1], 0, 0, 0]}])\n"
          "except GraphTunerError as e:\n    print(e); sys.exit(2)\n")


def other_append(log) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", APPEND, str(log)], capture_output=True, text=True, timeout=120)


def test_a_second_process_is_refused_while_one_writes_the_log(tmp_path):
    log = tmp_path / "m.log"
    log.write_text("# tuned here\n")
    with log_lock(log):
        done = other_append(log)
        assert done.returncode == 2, done.stderr
        assert f"{log}: another graph-tuner process (pid {os.getpid()}) is writing this log" in done.stdout
        assert log.read_text() == "# tuned here\n"  # the refused writer wrote nothing
    assert not lock_path(log).exists()  # let go: removed
    done = other_append(log)
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().count("\n") == 2


def test_the_lock_is_shared_through_a_link_and_reentrant(tmp_path):
    log = tmp_path / "m.log"
    log.write_text("")
    (tmp_path / "alias.log").symlink_to(log)
    with log_lock(tmp_path / "alias.log"):
        append_records(log, [REC])  # this process again, by the other name: allowed
        assert lock_path(log).exists()
        assert other_append(log).returncode == 2
    assert log.read_text().count("\n") == 1


def test_a_killed_writer_leaves_the_log_free(tmp_path):
    log = tmp_path / "m.log"
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from graph_tuner.log_lock import log_lock\n"
                               "with log_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)\n", str(log)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(GraphTunerError, match=f"pid {holder.pid}"):
            with log_lock(log):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_path(log).exists()  # kill -9 leaves the file, not the lock
    with log_lock(log):
        append_records(log, [REC])
    assert log.read_text().count("\n") == 1


def test_writes_log_locks_the_named_argument(tmp_path):
    seen = []

    @writes_log("where")
    def write(n, where, *, extra=0):
        seen.append(lock_path(where).exists())
        return n + extra

    assert write(1, tmp_path / "a.log", extra=2) == 3 and seen == [True]
    assert not lock_path(tmp_path / "a.log").exists()
