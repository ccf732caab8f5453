"""`python -m pipeline ...` is the `imgrec` command."""

from pipeline.cli import run

run()
