"""The analysis process: tensorflow-transform imported, traced and run beside a local conversion.

The launch (pipeline/launch/services.py) forks it (`AnalysisProcess.start`) once the request is
read, when the job will analyse on this machine with TFT's scratch in the temp dir; the job's
`transforms.analyze_aside.AnalyzeAside` hands it the training rows. Until then it imports TFT (without Keras 2, `_import_tft_without_keras`) and builds its small pipeline
(tracing the preprocessing_fn), on the core the job is not yet using; then it waits for the
request, runs the analysis and export (`transforms.analyze.export_to_scratch`) and answers with
the statistics summed exactly (transforms/statistics.py), or asks the job to read them back from
the export. So the launcher neither imports TFT nor traces before the first image, and the job
has no TFT stages of its own.

The end of the convert command stops it (`stop`); it exits by itself once its parent has gone.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import shutil
import signal
import sys
import tempfile
import types

from pipeline.launch import patches, startup
from pipeline.launch.forked_workers import end_child
from pipeline.launch.switches import Switches
from transforms.elements import AnalysisRow

__all__ = ["AnalysisProcess"]

_PREFIX = "imgrec-analysis-"


class AnalysisProcess:
    """The forked analysis process and its hand-off folder; `stop()` ends both.

    Forking is safe only before TensorFlow has run anything (its thread pools would not exist
    in the child): `start` imports Beam and TensorFlow, once, for both processes, and a process
    that had imported TensorFlow before (a library caller, a test) gets none, nor does a system
    without fork. The job then analyses in its own stages.
    """

    def __init__(self, pid: int, handoff: str):
        self.pid = pid
        self.handoff = handoff  # the folder the job's AnalyzeAside hands its rows to

    @classmethod
    def start(cls, switches: Switches) -> AnalysisProcess | None:
        """Fork the process; None where it cannot be (see the class)."""
        if sys.platform != "linux" or "tensorflow" in sys.modules:
            return None
        import apache_beam  # noqa: F401 - the job's and TFT's, imported once for both processes
        import tensorflow  # noqa: F401

        from transforms.analyze_aside import PID_FILE

        try:
            handoff = tempfile.mkdtemp(prefix=_PREFIX)
        except OSError:  # an unwritable temp dir: the preflight names it
            return None
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:  # no process to spare (EAGAIN, ENOMEM): the job analyses in its stages
            shutil.rmtree(handoff, ignore_errors=True)
            return None
        if pid == 0:  # the analysis process: never returns into the command's code
            _child(handoff, parent, switches)
        started = cls(pid, handoff)
        atexit.register(started.stop)
        try:
            with open(os.path.join(handoff, PID_FILE), "w", encoding="ascii") as f:
                f.write(str(pid))
        except OSError:  # a full temp disk: no hand-off (the preflight names the folder)
            started.stop()
            return None
        return started

    def stop(self) -> None:
        """End the process (if it still runs) and remove its hand-off folder."""
        if self.pid:
            end_child(self.pid, signal.SIGKILL, self.handoff)  # done already, or not needed
            self.pid = 0


def _child(handoff: str, parent: int, switches: Switches) -> None:
    """The analysis process's whole life, from the fork to its exit."""
    status = 1
    try:
        _run(handoff, parent, switches)
        status = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if _orphaned(parent):  # the command was killed (SIGTERM, SIGKILL): tidy up
            shutil.rmtree(handoff, ignore_errors=True)
        os._exit(status)


# ----------------------------------------------------------------------------- the process
def _orphaned(parent: int) -> bool:
    """Whether the command died without stopping this process (a stop() kills it first): it
    was re-parented, or it is a zombie its own parent has not reaped yet."""
    from transforms.analyze_aside import process_gone

    return os.getppid() != parent or process_gone(parent)


def _wait_request(handoff: str, parent: int) -> dict:
    """Block until the job's request arrives; exit quietly if the launcher has gone."""
    from transforms.analyze_aside import REQUEST, wait_for_file

    try:
        wait_for_file(handoff, (REQUEST,), parent)
    except RuntimeError:  # the launcher ended (or was killed) without needing the analysis
        if _orphaned(parent):  # killed: nobody else will remove the folder
            shutil.rmtree(handoff, ignore_errors=True)
        os._exit(0)
    with open(os.path.join(handoff, REQUEST), encoding="utf-8") as f:
        return json.load(f)


def _read_rows(request: dict, handoff: str):
    for name in request["parts"]:
        with open(os.path.join(handoff, name), "rb") as f:
            rows = pickle.load(f)
        yield from map(AnalysisRow._make, rows)


def _answer(
    unused_done, handoff: str, exact: bool, request: dict, sizes: dict, totals: dict | None
) -> None:
    """Answer the job once the export is written (or say why not): with the statistics summed
    exactly from the rows where that gives TFT's own numbers, else asking the job to read them
    back from the export (transforms/statistics.py)."""
    from transforms.analyze_aside import FAILED, READ_BACK, STATISTICS, write_json_atomic
    from transforms.statistics import exact_statistics

    split, names = request["train_split"], request["label_names"]
    try:
        stats = exact_statistics(totals, split, names, sizes, exact=exact)
    except ValueError as e:  # an empty split: the job fails with these words
        write_json_atomic(os.path.join(handoff, FAILED), {"message": str(e)})
        return
    if stats is None:  # TFT's loader needs Keras, which this process does without (below)
        args = {"train_split": split, "label_names": names, "size_quantiles": sizes}
        write_json_atomic(os.path.join(handoff, READ_BACK), args)
        return
    write_json_atomic(os.path.join(handoff, STATISTICS), stats)


def _import_tft_without_keras(switches: Switches) -> None:
    """Import TFT with a stand-in for its Keras module: this process never loads an export.

    `tensorflow_transform/keras_lib.py` imports `tf_keras` whole for two uses: an isinstance
    check on layers and the Keras layer a reader applies an export with. This process only
    traces, analyses and exports (the job reads an export back when it must, READ_BACK), so
    placeholder classes do; the export's bytes are the same. Guarded: if TFT no longer imports
    with the stand-in, it is imported as it is.
    """
    name = "tensorflow_transform.keras_lib"
    if not switches.patch_on("tft_without_keras") or any(
        m in sys.modules for m in (name, "tensorflow_transform", "tf_keras")
    ):
        import tensorflow_transform  # noqa: F401

        return
    sys.modules[name] = _keras_lib_stand_in(name)
    try:
        import tensorflow_transform  # noqa: F401
    except (ImportError, AttributeError, TypeError) as e:
        for loaded in [m for m in sys.modules if m.startswith("tensorflow_transform")]:
            del sys.modules[loaded]
        patches.skipped("tft_without_keras", f"TFT did not import with the stand-in ({e})")
        import tensorflow_transform  # noqa: F401


def _keras_lib_stand_in(name: str) -> types.ModuleType:
    class Layer:  # placeholders: never instantiated in this process
        pass

    class Model(Layer):
        pass

    stand_in = types.ModuleType(name, "imgrec's analysis process: TFT without Keras 2")
    stand_in.tf_keras = types.SimpleNamespace(
        layers=types.SimpleNamespace(Layer=Layer),
        Model=Model,
        utils=types.SimpleNamespace(register_keras_serializable=lambda **_: lambda cls: cls),
    )
    return stand_in


def _build(handoff: str, parent: int, exact: bool):
    """The analysis pipeline: wait for the request, analyse and export, answer."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions

    from pipeline.runners.direct import DirectRunner
    from transforms.analyze import export_to_scratch
    from transforms.analyze_aside import EXPORT_SUBDIR, TFT_SUBDIR
    from transforms.statistics import ExactSumsFn

    options = PipelineOptions(
        ["--direct_num_workers=1", "--direct_running_mode=in_memory"], save_main_session=False
    )
    options.view_as(TypeOptions).pipeline_type_check = False  # as the job's (builder.py)
    p = beam.Pipeline(runner=DirectRunner(), options=options)
    request = (
        p
        | "Start" >> beam.Create([None])
        | "WaitForRequest" >> beam.Map(lambda _: _wait_request(handoff, parent))
    )
    items = request | "ReadRows" >> beam.FlatMap(_read_rows, handoff)
    names = request | "LabelNames" >> beam.Map(lambda r: r["label_names"])
    exported, sizes = export_to_scratch(
        items, names, os.path.join(handoff, TFT_SUBDIR), os.path.join(handoff, EXPORT_SUBDIR)
    )
    totals = items | "ExactSums" >> beam.CombineGlobally(ExactSumsFn())
    _ = exported | "Answer" >> beam.Map(
        _answer,
        handoff,
        exact,
        request=beam.pvalue.AsSingleton(request),
        sizes=beam.pvalue.AsSingleton(sizes),
        totals=beam.pvalue.AsSingleton(totals),
    )
    return p


def _main(handoff: str, parent: int, switches: Switches) -> None:
    startup.defer_keras(switches)
    with patches.in_process_pickles(switches)():  # nothing this process pickles leaves it
        with startup.without_gc(switches):
            _import_tft_without_keras(switches)
            p = _build(handoff, parent, switches.exact_statistics)
        p.run().wait_until_finish()


def _run(handoff: str, parent: int, switches: Switches) -> None:
    """The analysis process's whole life; any failure is written as the job's answer.

    Its temporary files go to the hand-off folder, which the command removes when it ends
    (`stop`, also after killing this process), or this process when orphaned. TensorFlow's
    SavedModel export writes an `__autograph_generated_file*.py` to the temp dir and removes it
    at interpreter exit, which this process never reaches (`os._exit`, or SIGKILL): every
    default conversion left one in the user's temp dir.
    """
    tempfile.tempdir = handoff  # this process only: the command's own temp dir is unchanged
    try:
        _main(handoff, parent, switches)
    except BaseException as e:  # noqa: BLE001 - the job waits for an answer: give it one
        from transforms.analyze_aside import FAILED, write_json_atomic

        text = [line for line in str(e).splitlines() if line.strip()]
        write_json_atomic(
            os.path.join(handoff, FAILED),
            {"message": f"analysis failed: {type(e).__name__}: {text[-1] if text else ''}"},
        )
        raise
