"""Where a conversion runs: the local DirectRunner (direct.py), Dask (dask_runner.py) and Dataflow
(dataflow.py). The processes a local run starts beside them belong to the launch (pipeline/launch/)."""
