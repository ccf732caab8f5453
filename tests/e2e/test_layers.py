"""The layer rule (docs/DESIGN.md "Layers") in fresh interpreters: the modules that must stay light
(the training side, the per-file image logic, option parsing) import no Beam and no decoder."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.runs import ROOT, cli_env


def test_training_side_and_per_file_modules_import_without_beam():
    """In a fresh interpreter: the reader (training jobs have no Beam) with the versioned-root
    resolution it uses, and the per-file image modules (cheap to import where Beam pickles
    DoFns) load without importing apache_beam."""
    code = textwrap.dedent(
        """
        import sys
        import pipeline.reader, core.versions
        import transforms.images.check, transforms.images.store_modes
        import transforms.images.decode_worker
        print("BEAM" if "apache_beam" in sys.modules else "NO-BEAM")
        """
    )
    env = cli_env(CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "NO-BEAM"


def test_option_parsing_imports_no_decoder():
    """`imgrec convert --help` and option errors stay fast: options.py pulls in no image decoder
    (Pillow, TensorFlow) and none of the per-file modules that need numpy."""
    code = textwrap.dedent(
        """
        import sys
        import pipeline.options
        heavy = [m for m in ("PIL", "tensorflow", "transforms.images.check",
                             "transforms.images.decode", "transforms.images.store_modes")
                 if m in sys.modules]
        print("HEAVY=" + ",".join(heavy))
        """
    )
    env = cli_env()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY="
