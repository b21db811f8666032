import subprocess
import sys

from graph_tuner import __version__
from graph_tuner.cli import main


def test_version_flag(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert __version__ in capsys.readouterr().out


def test_bad_subcommand_exits_2_without_traceback():
    p = subprocess.run([sys.executable, "-m", "graph_tuner", "no-such-command"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "invalid choice" in p.stderr
