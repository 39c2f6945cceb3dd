"""Where the checkout's own files are (scenarios, the chart, playbooks, the node's sources, .tools)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
