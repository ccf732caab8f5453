"""The command on top of the stages: `imgrec` is program (launch/program.py) -> cli.py ->
launcher.py -> builder.py, with the launch wing (launch/), the runners (runners/), the reader
(reader/), the report (report/) and versioned reruns (versions/) beside it."""
