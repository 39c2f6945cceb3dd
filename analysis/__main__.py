"""`python -m analysis RUN_DIR`: (re)compute a run's metrics and report (same as `peerlab report`)."""
import sys

from analysis.job import analyse

if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m analysis RUN_DIR")
    print(analyse(sys.argv[1]))
