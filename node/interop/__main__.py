"""`python -m node.interop --binary BIN --config FILE`: node/interop/shim.py."""
import sys

from node.interop.shim import main

sys.exit(main())
