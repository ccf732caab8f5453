"""One-off ablations: each measured one choice; docs/benchmarks.md records the results."""
