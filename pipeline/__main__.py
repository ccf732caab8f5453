"""`python -m pipeline ...` is the `imgrec` command."""

import sys

from pipeline.cli import main

sys.exit(main())
