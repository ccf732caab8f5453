"""Where a conversion runs: Dask (dask_runner.py, dask_preload.py), Dataflow (dataflow.py) and
the workers' start-up plugin (worker_start.py). Nothing of the report or the reruns."""
