"""A long first build says it is still going and, at its end, what it took (orchestrator/builds/progress.py)."""
import subprocess

from orchestrator.builds import progress


def test_a_build_says_it_is_going_then_what_it_took(capsys):
    done = progress.run(["sleep", "0.35"], "a program", interval=0.1, capture_output=True)
    assert done.returncode == 0
    lines = capsys.readouterr().err.splitlines()
    going = [line for line in lines if line.startswith("peerlab: building a program: ") and line.endswith("so far")]
    assert len(going) >= 2, lines
    assert lines[-1].startswith("peerlab: built a program in ") and lines[-1].endswith(" s"), lines


def test_a_failed_build_says_so_and_keeps_the_commands_answer(capsys):
    done = progress.run(["sh", "-c", "echo nope >&2; exit 3"], "a program", capture_output=True, text=True)
    assert done.returncode == 3 and done.stderr == "nope\n"
    assert capsys.readouterr().err.splitlines()[-1].startswith("peerlab: failed building a program in ")
    assert isinstance(done, subprocess.CompletedProcess)
