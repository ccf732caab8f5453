"""Packaging of imgrec: the `imgrec` command, and the sdist Beam stages for `--setup_file`.

Dataflow (and any portable runner given `--setup_file ./setup.py`) runs `python setup.py sdist`
on the submitting machine, stages the tarball, and `pip install`s it on every worker. So this
file must work from an unpacked sdist too: requirements.txt ships inside it (MANIFEST.in) and
the version is read from the source rather than imported (importing pipeline pulls in Beam).
"""

from __future__ import annotations

import glob
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _read(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


def _requirements(name: str = "requirements.txt") -> list[str]:
    """The pinned runtime requirements, one per line, comments and blank lines dropped."""
    lines = (line.split("#", 1)[0].strip() for line in _read(name).splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _version() -> str:
    """VERSION from pipeline/launcher.py, the one place the version is written."""
    match = re.search(r'^VERSION = "([^"]+)"', _read("pipeline/launcher.py"), re.M)
    if not match:
        raise RuntimeError('pipeline/launcher.py: VERSION = "X.Y.Z" not found')
    return match.group(1)


setup(
    name="imgrec",
    version=_version(),
    description="Convert image folders and buckets into sharded, deterministic TFRecords (Apache Beam).",
    long_description=_read("README.md"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(
        include=["core", "core.*", "pipeline", "pipeline.*", "transforms", "transforms.*"]
    ),
    install_requires=_requirements(),
    # Example convert configs (read by the launcher through --config, never by workers).
    data_files=[("share/imgrec/configs", sorted(glob.glob("configs/*.yaml", root_dir=HERE)))],
    entry_points={"console_scripts": ["imgrec = pipeline.launch.program:run"]},
    license="Apache-2.0",
)
