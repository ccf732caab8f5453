"""A Beam plugin (`--beam_plugins`) that imgrec's worker processes import at start-up.

Beam's SDK worker imports its plugins before it takes any work: here a worker reads imgrec's
switches, applies its patches (pipeline/launch/patches.py) and imports TensorFlow and the stages'
modules without the garbage collector, as the `imgrec` program does, so its bundles find them
imported. The launch adds it to runs whose workers are other processes (pipeline/launch/choose.py);
Dask's workers import it through pipeline/launch/dask_preload.py.
"""

from pipeline.launch import patches, startup
from pipeline.launch.switches import read_switches

__all__: list[str] = []

_SWITCHES = read_switches()
startup.defer_keras(_SWITCHES)
patches.install(_SWITCHES)
with startup.without_gc(_SWITCHES):
    import tensorflow  # noqa: F401 - the stages' decoders, writers and TFT analyzers use it

    import pipeline.builder  # noqa: F401 - every stage module whose DoFns the bundles unpickle
