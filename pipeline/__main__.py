"""`python -m pipeline ...` is the `imgrec` command."""

from pipeline.launch.program import run

run()
