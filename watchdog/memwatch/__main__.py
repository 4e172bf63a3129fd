"""``python -m memwatch``: the standalone watchdog command (see memwatch.cli)."""

import sys

from memwatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
