"""`peerlab COMMAND --help` teaches: every command has a help page, and every example it shows is a
command line the parser accepts (for the same command)."""
import argparse
import contextlib
import io
import shlex

import pytest

from orchestrator.cli import build_parser


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def help_text(parser: argparse.ArgumentParser) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        parser.parse_args(["--help"])
    assert ended.value.code == 0
    return out.getvalue()


def examples(text: str) -> list[str]:
    lines = text.split("examples:\n", 1)[1].splitlines() if "examples:\n" in text else []
    found = []
    for line in lines:
        if not line.startswith("  peerlab "):
            break
        found.append(line.split("  #", 1)[0].strip())
    return found


@pytest.mark.parametrize("name", sorted(commands()))
def test_each_command_explains_itself_with_examples_that_parse(name):
    text = help_text(commands()[name])
    assert f"usage: peerlab {name}" in text
    assert "%%" not in text  # a description is not %-formatted: a doubled percent would show as is
    shown = examples(text)
    if name not in ("doctor",):  # nothing to vary: `peerlab doctor` takes no options
        assert shown, f"`peerlab {name} --help` shows no example"
    for example in shown:
        argv = shlex.split(example)[1:]
        assert argv[0] == name, example
        assert callable(build_parser().parse_args(argv).func), example  # a usage error exits instead


def test_the_top_level_examples_parse():
    for example in examples(help_text(build_parser())):
        build_parser().parse_args(shlex.split(example)[1:])


def test_descriptions_are_wrapped_for_a_terminal():
    for name, parser in commands().items():
        description = help_text(parser).split("\n\n")[1]
        assert max(len(line) for line in description.splitlines()) <= 100, name


def test_run_and_plan_take_the_same_backends_and_the_parsers_load_no_backend(tmp_path):
    """`--backend`'s names are declared once (orchestrator/backends: the three backends and the
    simulator): `plan` offers them, `run` refuses any other naming them; building the parsers imports
    none of the backends' code (`peerlab --help` stays quick)."""
    import subprocess
    import sys

    from orchestrator.backends import TARGETS
    from tests.support.cli import ROOT, peerlab

    assert TARGETS == ("local", "docker", "kubernetes", "sim")
    plan = commands()["plan"]
    assert next(a for a in plan._actions if a.dest == "backend").choices == TARGETS
    refused = peerlab("run", str(ROOT / "scenarios" / "quickstart.yaml"), "--backend", "nope")
    assert refused.returncode == 2 and "available backends are local, docker, kubernetes, sim" in refused.stderr
    loaded = subprocess.run([sys.executable, "-c", "import sys; from orchestrator.cli import build_parser; "
                             "build_parser(); print(sorted(m for m in sys.modules if m.startswith('orchestrator.backends')))"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['orchestrator.backends']", loaded
