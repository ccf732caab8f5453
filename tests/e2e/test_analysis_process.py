"""The analysis process (pipeline/launch/analysis_process.py) in the `imgrec` program: the dataset
is byte for byte the one TFT makes inside the job, TFT runs there without Keras 2, an empty
training split fails in the statistics' words, and a killed command leaves nothing behind."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys

from core import schema
from pipeline.demo import build_corpus
from pipeline.launch.switches import ENV
from tests.runs import ROOT, cli, cli_env, script_facts

# A fresh interpreter started as the `imgrec` program starts (pipeline/launch/program.py), each
# conversion run as the program runs it (as_program; -v leaves the streams alone, no forked
# workers): the first conversion forks the analysis process (TensorFlow not loaded yet), a second
# (if given a second output) finds TensorFlow loaded and analyses in the job's own stages. It
# prints, per run, the hand-off folder the builder claimed (None: in-job), the process's answer
# and whether anything is left.
_CONVERSIONS = """
import json, os, sys, tempfile
from pipeline import cli, launcher
from pipeline.launch import program
from pipeline.launch.plan import read_plan
from pipeline.launch.switches import read_switches

from transforms import analyze_aside

claimed, answers, services_seen = [], [], []
build = launcher.build_pipeline  # the services the builder is handed, and their hand-off folder
def spy(*args):
    services_seen.append(args[-1])
    claimed.append(args[-1].analysis_handoff)
    return build(*args)
launcher.build_pipeline = spy
wait = analyze_aside.wait_for_file  # the job's wait for the answer (the process has its own)
analyze_aside.wait_for_file = lambda *args: answers.append(wait(*args)) or answers[-1]
src, outputs = sys.argv[1], sys.argv[2:]
switches = read_switches()
program.start(switches)
for out in outputs:
    plan = read_plan(["-v", "convert", "--input", src + "/*/*.jpg", "--output", out,
                      "--splits", "train=0.8,validation=0.2"], as_program=True, switches=switches)
    status = cli.run_command(plan)
    assert status == 0, status
left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("imgrec-")]
running = [s.analysis is not None for s in services_seen]
print(json.dumps({"claimed": claimed, "left": left, "started": any(running) or None,
                  "answers": answers}))
"""


def _digests(out: str) -> dict[str, str]:
    files = sorted(glob.glob(os.path.join(out, "*", "*.tfrecord")))
    return {
        os.path.relpath(f, out): hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files
    }


def _info(out: str) -> dict:
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    info.pop("provenance")  # start/finish times and argv differ run to run
    return info


def test_same_dataset_with_and_without_the_process(tmp_path):
    """Both of the process's answers: the statistics summed exactly (the default) and the job
    reading them back from the export (IMGREC_EXACT_STATISTICS=0, as for sums too large to be
    exact); and the in-job run, which reads them back through TFT with Keras whatever it says
    (transforms/statistics.py): all three write the same dataset."""
    from transforms.analyze_aside import READ_BACK, STATISTICS

    exact_env = ENV["exact_statistics"]
    src = str(tmp_path / "src")
    build_corpus(src, num_images=24, seed=3, long_side=(64, 96), broken=False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    exact, in_job = str(tmp_path / "process"), str(tmp_path / "in-job")
    read_back = str(tmp_path / "process-read-back")
    env = {"TMPDIR": str(tmp), ENV["forked_workers"]: "0"}
    facts = script_facts(_CONVERSIONS, src, exact, in_job, **env, **{exact_env: "1"})
    first, second = facts["claimed"]
    assert first and os.path.basename(first).startswith("imgrec-analysis-")
    assert second is None  # TensorFlow was loaded by the first run: TFT ran in the job
    assert facts["started"] is None and facts["left"] == []  # stopped, scratch removed
    assert facts["answers"] == [STATISTICS]
    facts = script_facts(_CONVERSIONS, src, read_back, **env, **{exact_env: "0"})
    (claimed,) = facts["claimed"]
    assert claimed and os.path.basename(claimed).startswith("imgrec-analysis-")
    assert facts["started"] is None and facts["left"] == []
    assert facts["answers"] == [READ_BACK]

    for out in (in_job, read_back):
        assert _digests(out) == _digests(exact) and _digests(exact)
        assert _info(out) == _info(exact)
        for sub in ("transform_fn", "transformed_metadata"):
            assert _tree(out, sub) == _tree(exact, sub)
    assert _info(exact)["statistics"]["num_images"] > 0


def _tree(out: str, sub: str) -> list[str]:
    return sorted(os.path.relpath(p, out) for p in glob.glob(f"{out}/{sub}/**", recursive=True))


# A fresh interpreter set up as the analysis process is: TFT imported after the stand-in for its
# keras_lib, then a transform traced, analysed and exported (the process's whole use of TFT).
_WITHOUT_KERAS = """
import json, sys
import apache_beam as beam
from pipeline.launch import startup
startup.defer_keras()
import tensorflow
from pipeline.launch import analysis_process
from pipeline.launch.switches import Switches
analysis_process._import_tft_without_keras(Switches())
from transforms.analyze import export_to_scratch
from transforms.elements import AnalysisRow
items = [AnalysisRow("mem://cat.png", [3.0, 6.0, 9.0, 9.0, 36.0, 81.0, 1], 1, 1, "cat")]
with beam.Pipeline() as p:
    export_to_scratch(p | beam.Create(items), ["cat"], sys.argv[1], sys.argv[2])
print(json.dumps({"tf_keras": "tf_keras" in sys.modules,
                  "stand_in": "imgrec" in (sys.modules["tensorflow_transform.keras_lib"].__doc__
                                           or "")}))
"""


def test_tft_traces_and_exports_without_keras(tmp_path):
    """The installed TFT imports, traces and exports with the analysis process's stand-in for
    its keras_lib, and Keras 2 is never loaded: a TFT upgrade that needs more of tf_keras there
    fails here, not in users' conversions."""
    export = tmp_path / "export"
    facts = script_facts(_WITHOUT_KERAS, str(tmp_path / "tft"), str(export))
    assert facts == {"tf_keras": False, "stand_in": True}
    assert (export / "transform_fn" / "saved_model.pb").exists()


def test_an_empty_training_split_fails_in_the_statistics_own_words(tmp_path):
    """The process's exact statistics refuse an empty split as read_statistics does: the job
    fails with one line naming --splits and --no_analyze, and writes no dataset_info.json."""
    src = str(tmp_path / "src")
    build_corpus(src, num_images=3, seed=3, long_side=(64, 96), broken=False)
    out = tmp_path / "ds"
    proc = cli(
        "convert", "--input", f"{src}/*/*.jpg", "--output", str(out),
        "--splits", "train=0.001,validation=0.999", check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the 'train' split is empty" in proc.stderr, proc.stderr[-2000:]
    assert "--splits, or pass --no_analyze" in proc.stderr
    assert not (out / schema.DATASET_INFO).exists()


def test_a_killed_command_leaves_no_hand_off_folder(tmp_path):
    """SIGTERM (timeout, docker stop) runs no exit handler in the command: the analysis process
    notices its parent gone, removes the hand-off folder itself and exits."""
    import signal
    import time

    src = str(tmp_path / "src")
    build_corpus(src, num_images=200, seed=4, long_side=(200, 300), broken=False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = [sys.executable, "-m", "pipeline", "convert", "--input", f"{src}/*/*.jpg"]
    proc = subprocess.Popen(
        [*argv, "--output", str(tmp_path / "ds")],
        env=cli_env(TMPDIR=str(tmp)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        folders: list = []
        while not folders:  # the analysis process is forked and has its pid file
            assert proc.poll() is None and time.monotonic() < deadline
            folders = [p for p in tmp.glob("imgrec-analysis-*") if (p / "pid").exists()]
            time.sleep(0.05)
        child = int((folders[0] / "pid").read_text())
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 60
    from transforms.analyze_aside import process_gone

    while folders[0].exists() or not process_gone(child):
        assert time.monotonic() < deadline, f"left: {os.listdir(tmp)}"
        time.sleep(0.1)
