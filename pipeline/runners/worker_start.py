"""A Beam plugin (`--beam_plugins`) that each DirectRunner worker process imports at start-up.

Beam's SDK worker (`apache_beam.runners.worker.sdk_worker_main`) imports the plugins it is given
before it takes any work. Importing TensorFlow and the stages' modules here, with the cyclic
garbage collector off until they are in (core/startup.py), takes each worker ~0.9 s
less CPU than letting the first bundle's DoFns import them with it on (2.2-2.7 s -> 1.4-1.8 s,
measured in a worker process); the bundles then find them imported. The launcher adds this
plugin to DirectRunner runs with worker processes (`pipeline.runners.choose.configure_runner`).
"""

from core.startup import defer_beam_extras, defer_keras, on_a_roomy_stack, without_gc

__all__: list[str] = []

defer_keras()  # TensorFlow's import without Keras, as in the `imgrec` program (startup.py)
# Beam's without the clients imgrec does not use, as in the program: in Dask's workers and
# scheduler (pipeline/runners/dask_preload.py), which import Beam here first; a no-op in
# DirectRunner workers, whose `sdk_worker_main` has imported Beam before its plugins.
defer_beam_extras()


def _import_the_stages() -> None:
    with without_gc():
        import tensorflow  # noqa: F401 - the stages' decoders, writers and TFT analyzers use it

        import pipeline.builder  # noqa: F401 - every stage module whose DoFns the bundles unpickle


# Above one large frame: the imports' frames stay in one stack chunk (core/startup.py).
on_a_roomy_stack(_import_the_stages)
