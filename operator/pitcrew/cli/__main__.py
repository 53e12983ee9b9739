"""``python -m pitcrew.cli``: the same command line as ``pitcrew``."""

import sys

from pitcrew.cli.main import main

sys.exit(main())
