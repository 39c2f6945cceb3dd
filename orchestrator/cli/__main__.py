import sys

from orchestrator.cli import cli

sys.exit(cli())
