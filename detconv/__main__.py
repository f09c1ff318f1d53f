"""`python -m detconv [demo|bench|info]`."""

import sys

from detconv.cli import main

if __name__ == "__main__":
    sys.exit(main())
