"""The launch wing: how imgrec's processes start (pipeline/launch/startup.py), the command line read
once into a plan (plan.py), the local runner and its workers (direct_runner.py, choose.py,
forked_workers.py), TFT's analysis process (analysis_process.py) and the Beam patches kept
(patches.py). Nothing outside it changes global state."""
