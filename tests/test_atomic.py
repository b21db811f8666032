"""Outputs are written whole or not at all, with the mode a plain open() would give them."""
from __future__ import annotations

import errno
import os
import stat

import pytest

from graph_tuner import atomic
from graph_tuner.atomic import atomic_write_all, atomic_write_text
from graph_tuner.errors import GraphTunerError


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_new_file_gets_the_umask_mode(tmp_path, umask_027):
    atomic_write_text(tmp_path / "plan.log", "x\n")
    with open(tmp_path / "plain.log", "w") as f:
        f.write("x\n")
    assert _mode(tmp_path / "plan.log") == _mode(tmp_path / "plain.log") == 0o640


def test_a_replaced_file_keeps_its_mode(tmp_path, umask_027):
    path = tmp_path / "plan.log"
    path.write_text("old\n")
    os.chmod(path, 0o604)
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and _mode(path) == 0o604


def test_no_output_is_replaced_when_one_fails(tmp_path, monkeypatch):
    a, b = tmp_path / "a.log", tmp_path / "b.json"
    a.write_text("old a\n")
    b.write_text("old b\n")
    calls = []
    real_fsync = os.fsync

    def full_disk_on_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", full_disk_on_second)
    with pytest.raises(GraphTunerError, match="b.json: cannot write the output .No space left on device"):
        atomic_write_all({a: "new a\n", b: "new b\n"})
    assert a.read_text() == "old a\n" and b.read_text() == "old b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log", "b.json"]  # no temp file left


def test_a_folder_in_the_way_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(GraphTunerError, match=r"file/out.log: cannot write the output"):
        atomic_write_text(tmp_path / "file" / "out.log", "x")
    with pytest.raises(GraphTunerError, match="is a folder"):
        atomic_write_text(tmp_path, "x")


def test_temp_files_of_killed_writers_are_swept(tmp_path):
    """A kill between writing the temp file and renaming it leaves `.NAME.*.tmp`; the next
    write of NAME removes those older than an hour, and leaves a live writer's alone."""
    stale, live, other = (tmp_path / ".plan.log.abc.tmp", tmp_path / ".plan.log.def.tmp",
                          tmp_path / ".other.log.abc.tmp")
    for p in (stale, live, other):
        p.write_text("partial")
    old = os.stat(stale).st_mtime - 2 * atomic.STALE_S
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    atomic_write_text(tmp_path / "plan.log", "x\n")
    assert not stale.exists() and live.exists() and other.exists()


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    target = tmp_path / "runs" / "plan.log"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "latest.log"
    link.symlink_to(target)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["plan.log"]  # no temp file left


def test_a_device_or_pipe_is_written_through_not_replaced(tmp_path):
    """A rename over /dev/null (as root) would leave it a regular file: special files are opened
    and written as open(path, "w") would."""
    before = os.stat(os.devnull)
    atomic_write_all({os.devnull: "discarded\n", tmp_path / "plan.log": "kept\n"})
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert (tmp_path / "plan.log").read_text() == "kept\n"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that opening it to write does not block
    try:
        atomic_write_text(fifo, "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    finally:
        os.close(reader)


def test_standard_output_by_name_is_written_through(tmp_path):
    """/dev/stdout links to /proc/self/fd/1, whose own link (a pipe's) names no file: it is
    opened by name, and stays a link."""
    import subprocess
    import sys

    if not os.path.islink("/dev/stdout"):
        pytest.skip("no /dev/stdout link here")
    code = "from graph_tuner.atomic import atomic_write_text; atomic_write_text('/dev/stdout', 'to the pipe\\n')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "to the pipe\n" and os.path.islink("/dev/stdout")


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_standard_output_sent_to_a_file_is_appended_to_not_replaced(tmp_path, name):
    """`solve -o /dev/stdout >> notes.txt`: /dev/stdout then resolves to notes.txt, a regular
    file, which a rename replaced (the notes gone, and the report printed to the old file).
    The records go through the descriptor, after what was printed before."""
    import subprocess
    import sys

    if not os.path.exists(name):
        pytest.skip(f"no {name} here")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code = ("from graph_tuner.atomic import atomic_write_all; print('report', flush=False); "
            f"atomic_write_all({{{name!r}: 'records\\n', {str(tmp_path / 'b.txt')!r}: 'b\\n'}}); print('after')")
    with open(notes, "a") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True)
    assert notes.read_text() == "my notes\nreport\nrecords\nafter\n"
    assert (tmp_path / "b.txt").read_text() == "b\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_own_descriptor_only_names_this_processs_open_ones():
    assert atomic.own_descriptor("/dev/stdout") == 1
    assert atomic.own_descriptor(f"/proc/{os.getpid()}/fd/2") == 2
    assert atomic.own_descriptor("/proc/1/fd/1") is None  # another process's
    assert atomic.own_descriptor("/dev/fd/987654") is None  # not open
    assert atomic.own_descriptor("/tmp/dev/fd/1") is None
