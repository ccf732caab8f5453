"""`bench/ablations/startup.py --fix keras`'s worker start-up plugin: pipeline/runners/worker_start.py as it was
before `startup.defer_keras`, so that each worker's `import tensorflow` loads Keras 2 again."""

from core.startup import without_gc

with without_gc():
    import tensorflow  # noqa: F401

    import pipeline.builder  # noqa: F401
