"""Analyze aside: hand the training items' statistics to the analysis process, publish its export.

A local conversion starts tensorflow-transform in a process of its own as the command starts
(pipeline/launch/analysis_process.py): TFT's import (with TensorFlow's and Keras 2's), the tracing of
the preprocessing_fn and the Beam stages of its analysis then run beside the conversion, on the
other core, instead of before its first image (import, tracing) and after its last (analysis,
export). This transform is the job's side of it. It writes the per-image rows TFT's analyzers
read (pixel sums, sides, label; a few dozen bytes each) into the hand-off folder, batch by batch,
then names them in a request; the process runs `transforms.analyze.export_to_scratch` on them,
takes the statistics (`transforms.statistics`: summed exactly from the rows, or read back from
the export here) and answers; the export is published into the dataset here, as
`AnalyzeDataset` publishes it. Same analyzers, same rows, same export: the statistics are exact
sums and counts, so the dataset's bytes do not depend on where TFT ran.

The protocol is files in one folder (any process of the job may hold the DoFns: the launcher in
in-memory runs, a worker process otherwise):
    rows-<id>.pkl       written here (temp name, rename): a list of `analysis_row` tuples
    request.json        written here last: {"parts": [file names], "label_names", "train_split"}
    statistics.json     the process's answer (the "statistics" dict), or
    failed.json         {"message": ...}: the statistics' ValueError (an empty split), or
    read_back.json      {"train_split", "label_names", "size_quantiles"}: read the statistics
                        back from the export here (totals not exact in float64, inputs that
                        are not whole numbers, or the switch IMGREC_EXACT_STATISTICS=0)
    tft/export/         TFT's export, published from here
    pid                 the process id, so a wait notices a process that died without answering
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
import uuid

import apache_beam as beam

from transforms.analyze import publish_export
from transforms.elements import AnalysisRow, InspectedImage
from transforms.statistics import read_statistics

__all__ = [
    "AnalyzeAside",
    "EXPORT_SUBDIR",
    "FAILED",
    "PID_FILE",
    "READ_BACK",
    "REQUEST",
    "STATISTICS",
    "analysis_row",
    "process_gone",
    "wait_for_file",
    "write_json_atomic",
]

REQUEST = "request.json"
STATISTICS = "statistics.json"
FAILED = "failed.json"
# The answer when only the export can say what TFT computed (transforms/statistics.py): the
# job reads the statistics back itself, with Keras (the analysis process runs TFT without it).
READ_BACK = "read_back.json"
PID_FILE = "pid"
# TFT's scratch (its Context temp_dir) inside the hand-off folder, and its export inside that.
TFT_SUBDIR = "tft"
EXPORT_SUBDIR = os.path.join(TFT_SUBDIR, "export")
# How often a wait looks for the other side's file: a poll costs a stat() (~2 µs); 10 ms is
# 1/10 of the 100 ms that matter at one file, and nothing next to the 0.5-3 s waited for.
POLL_S = 0.01
# Rows per part file: one pickle per batch of items, so a bundle of many thousands of images
# never holds its rows twice; 4,096 rows are ~200 KB pickled.
_MIN_ROWS, _MAX_ROWS = 64, 4096


def analysis_row(item: InspectedImage) -> tuple:
    """InspectedImage -> the plain tuple of its AnalysisRow (pickled without the class name)."""
    return tuple(AnalysisRow.of(item))


def write_json_atomic(path: str, value) -> None:
    """Write JSON under a temp name, then rename: a reader never sees half a file."""
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(value, f)
    os.replace(temp, path)


def process_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts as gone: it answers nothing any more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (macOS): signal 0 tells whether the process exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def wait_for_file(folder: str, names: tuple[str, ...], pid: int | None = None) -> str:
    """Wait until one of `names` exists in `folder`; returns its name.

    Raises:
        RuntimeError: if process `pid` (the other side) ended first.
    """
    while True:
        for name in names:
            if os.path.exists(os.path.join(folder, name)):
                return name
        if pid is not None and process_gone(pid):
            for name in names:  # it may have answered just before it exited
                if os.path.exists(os.path.join(folder, name)):
                    return name
            raise RuntimeError(
                f"the analysis process (pid {pid}) ended without an answer in {folder}; rerun, "
                "or pass --no_analyze"
            )
        time.sleep(POLL_S)


class _WriteRowsFn(beam.DoFn):
    """[InspectedImage] -> the name of the part file holding their analysis rows."""

    def __init__(self, handoff: str):
        self._handoff = handoff

    def process(self, items):
        name = f"rows-{uuid.uuid4().hex}.pkl"
        path = os.path.join(self._handoff, name)
        with open(path + ".tmp", "wb") as f:
            pickle.dump([analysis_row(item) for item in items], f, pickle.HIGHEST_PROTOCOL)
        os.replace(path + ".tmp", path)
        yield name


class _RequestFn(beam.DoFn):
    """[part names] -> the request, written: the analysis process starts on it."""

    def __init__(self, handoff: str, train_split: str):
        self._handoff = handoff
        self._train_split = train_split

    def process(self, parts, label_names):
        request = {
            "parts": sorted(parts),
            "label_names": list(label_names),
            "train_split": self._train_split,
        }
        write_json_atomic(os.path.join(self._handoff, REQUEST), request)
        yield len(parts)


class _AnswerFn(beam.DoFn):
    """The request's token -> the statistics dict: wait for the answer, publish the export."""

    def __init__(self, handoff: str, output_dir: str):
        self._handoff = handoff
        self._output_dir = output_dir

    def process(self, unused_token, after):
        del after  # only ordered this step after the stages that make it (the shards)
        with open(os.path.join(self._handoff, PID_FILE), encoding="ascii") as f:
            pid = int(f.read())
        answer = wait_for_file(self._handoff, (STATISTICS, FAILED, READ_BACK), pid)
        with open(os.path.join(self._handoff, answer), encoding="utf-8") as f:
            value = json.load(f)
        if answer == FAILED:
            raise ValueError(value["message"])  # the statistics' own words (empty split)
        export = os.path.join(self._handoff, EXPORT_SUBDIR)
        if answer == READ_BACK:
            value = read_statistics(export, **value)
        publish_export(export, self._output_dir)
        shutil.rmtree(os.path.join(self._handoff, TFT_SUBDIR), ignore_errors=True)
        yield value


class AnalyzeAside:
    """InspectedImage (train split) -> the "statistics" dict, analysed by the analysis process.

    Same output and side effect as `transforms.analyze.AnalyzeDataset` (`transform_fn/`,
    `transformed_metadata/` in `output_dir`); TFT runs in the process that waits on `handoff`.
    Two steps, so that the job has work to do while TFT runs: `request` hands the rows over,
    `answer` waits for the statistics once the stages it is given as `after` are done (the
    shards: `pipeline/builder.py` also starts writing them only after the request). Without
    that order Beam's runner took the wait first, then wrote the shards (12,000 photos: 1.9 s
    of the run spent waiting, docs/benchmarks.md).

    Args:
        output_dir: the dataset directory the export is published into.
        label_names: a PCollection holding one list (label id -> name).
        handoff: the hand-off folder of a started analysis process (local disk).
        train_split: the split whose items are analysed.
    """

    def __init__(
        self, output_dir: str, label_names: beam.PCollection, handoff: str, train_split: str
    ):
        self._output_dir = output_dir
        self._label_names = label_names
        self._handoff = handoff
        self._train_split = train_split

    def request(self) -> beam.PTransform:
        """InspectedImage -> one token, once the request is written (its rows handed over)."""
        return _request(self._handoff, self._label_names, self._train_split)

    def answer(self, after: beam.PCollection) -> beam.PTransform:
        """The request's token -> the statistics dict, waited for once `after` is complete."""
        return _answer(self._handoff, self._output_dir, after)


@beam.ptransform_fn
def _request(images, handoff: str, label_names: beam.PCollection, split: str):
    parts = (
        images
        | "KeepTrainSplit" >> beam.Filter(lambda item: item.split == split)
        | "Batch" >> beam.BatchElements(min_batch_size=_MIN_ROWS, max_batch_size=_MAX_ROWS)
        # [InspectedImage] -> part file name
        | "WriteRows" >> beam.ParDo(_WriteRowsFn(handoff))
        | "AllParts" >> beam.combiners.ToList()
    )
    return parts | "Request" >> beam.ParDo(
        _RequestFn(handoff, split), label_names=beam.pvalue.AsSingleton(label_names)
    )


@beam.ptransform_fn
def _answer(token, handoff: str, output_dir: str, after: beam.PCollection):
    return token | "Answer" >> beam.ParDo(
        _AnswerFn(handoff, output_dir), after=beam.pvalue.AsIter(after)
    )
