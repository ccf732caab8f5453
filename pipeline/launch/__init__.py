"""The launch wing: how imgrec's processes start (pipeline/launch/startup.py), its environment
switches read once (switches.py), the command line read once into a plan (plan.py), the services
started beside a command (services.py: TFT's analysis process, analysis_process.py, and the
forked workers' zygote, forked_workers.py), the runner's workers chosen (choose.py) and the Beam
patches kept (patches.py). Nothing outside it changes global state."""
