"""The README and docs say true things: named paths exist, examples match a real run."""

from __future__ import annotations

import ast
import glob
import os
import re
import subprocess

import pytest

from tests import source_ast
from tests.runs import ROOT as ROOT_PATH

ROOT = str(ROOT_PATH)
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# Repository paths named in prose or code: a top-level folder of this repository, or a file
# name with an extension the repository uses for its own files.
_TOP = "docs|tests|core|pipeline|transforms|bench|configs|scripts|examples|\\.ci"
_PATH = re.compile(
    rf"(?<![\w/.:-])((?:{_TOP})/[\w./-]*[\w/]|[\w.-]+\.(?:md|sh|yaml|py|txt)\b|Dockerfile\.\w+)"
)

# File names the docs mention that are not this repository's files.
_NOT_OURS = {
    "submission_environment_dependencies.txt",  # Beam stages it on Dataflow
    # Annotation tools' and TensorFlow's file names (docs/annotations.md)
    "create_pascal_tf_record.py",
    "create_coco_tf_record.py",
    "data.yaml",
    "classes.txt",
    "train.txt",
    "notes.json",
}


def _tracked() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def _help_texts() -> dict[str, str]:
    import contextlib
    import io

    from pipeline import cli, launcher

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        launcher.print_help()
    with open(os.path.join(ROOT, "run_dataflow.sh")) as f:
        dataflow = f.read()
    usage = dataflow[dataflow.index("usage()") : dataflow.index("\nEOF", dataflow.index("usage()"))]
    return {"imgrec --help": cli._USAGE, "imgrec convert --help": buf.getvalue(),
            "run_dataflow.sh --help": usage}  # fmt: skip


def _named_paths(text: str) -> set[str]:
    found = set()
    for m in _PATH.finditer(text):
        p = m.group(1).rstrip(".")
        stem = os.path.basename(p).split(".")[0]
        if any(c in p for c in "*<>{}$") or "_work" in p or stem.isupper() or p in _NOT_OURS:
            continue  # patterns, placeholders (FILE.yaml), benchmark output, others' file names
        found.add(p)
    return found


def _exists(path: str, tracked: set[str], base: str = ROOT) -> bool:
    if os.path.exists(os.path.join(base, path)) or os.path.exists(os.path.join(ROOT, path)):
        return True
    if "/" not in path:  # a bare file name: some file of the repository has it
        return any(os.path.basename(t) == path for t in tracked)
    return False


def test_every_relative_path_the_docs_and_help_name_exists():
    tracked = _tracked()
    missing = []
    for doc in [README, *DOCS]:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        for link in _LINK.findall(text):
            if re.match(r"^[a-z]+:", link) or link.startswith("#"):
                continue
            target = link.split("#")[0]
            if not os.path.exists(os.path.join(os.path.dirname(doc), target)):
                missing.append(f"{os.path.relpath(doc, ROOT)}: link {link}")
        for p in _named_paths(text):
            if not _exists(p, tracked):
                missing.append(f"{os.path.relpath(doc, ROOT)}: {p}")
    for where, text in _help_texts().items():
        for p in _named_paths(text):
            if not _exists(p, tracked):
                missing.append(f"{where}: {p}")
    assert not missing, "\n".join(missing)


def _anchors(path: str) -> set[str]:
    """The fragments a Markdown file answers to on GitHub: its headings' slugs (lowercased,
    punctuation dropped, spaces as hyphens, repeats numbered) and its explicit `<a id=...>`."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    found = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    seen: dict[str, int] = {}
    for title in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_every_link_to_a_section_finds_it():
    missing = []
    for doc in [README, *DOCS]:
        with open(doc, encoding="utf-8") as f:
            links = _LINK.findall(f.read())
        for link in links:
            target, _, fragment = link.partition("#")
            if not fragment or re.match(r"^[a-z]+:", link) or not target.endswith(".md") and target:
                continue
            path = os.path.join(os.path.dirname(doc), target) if target else doc
            if os.path.exists(path) and fragment not in _anchors(path):
                missing.append(f"{os.path.relpath(doc, ROOT)}: link {link}")
    assert not missing, "\n".join(missing)


def test_the_path_check_catches_a_missing_file():
    assert "docs/README_dataflow.md" in _named_paths("see docs/README_dataflow.md.")
    assert not _exists("docs/README_dataflow.md", _tracked())
    assert "Dockerfile.worker" in _named_paths("docker build -f Dockerfile.worker .")


def test_readme_fits_on_a_few_screens():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 250


def test_python_snippets_compile_and_import_what_they_use():
    problems = []
    for doc in [README, *DOCS]:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            where = f"{os.path.relpath(doc, ROOT)} python block {i + 1}"
            try:
                tree = source_ast.parse(block)
            except SyntaxError as e:
                problems.append(f"{where}: {e}")
                continue
            imported = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    imported |= {a.asname or a.name for a in node.names}
            for module in ("json", "os", "np", "tf", "tft", "math"):
                uses = any(
                    isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == module for n in ast.walk(tree)
                )  # fmt: skip
                if uses and module not in imported:
                    problems.append(f"{where}: uses {module}. without importing it")
    assert not problems, "\n".join(problems)


def _imgrec_commands() -> list[str]:
    from pipeline import cli

    listed = cli._USAGE.split("commands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in listed.strip().splitlines()] + ["help"]


def test_run_local_passes_every_imgrec_command_through():
    with open(os.path.join(ROOT, "run_local.sh")) as f:
        script = f.read()
    dispatch = re.search(r"\n\s+([\w|]+)\) exec python -m pipeline \"\$@\"", script)
    commands = _imgrec_commands()
    assert {"convert", "verify", "inspect", "preview", "versions"} <= set(commands)
    assert dispatch and set(commands) <= set(dispatch.group(1).split("|"))


def test_shipped_configs_parse_and_the_local_one_stays_offline():
    from pipeline.launcher import parse_convert_args

    _, config, _ = parse_convert_args(["--config", os.path.join(ROOT, "configs", "local.yaml")])
    assert config.inputs and not any("://" in p for p in [*config.inputs, config.output])
    _, config, _ = parse_convert_args(["--config", os.path.join(ROOT, "configs", "example.yaml")])
    assert config.output.startswith("gs://")


def test_verify_caps_a_problem_at_one_short_line():
    from pipeline.verify import VerifyReport

    report = VerifyReport()
    report.problem("shard x: corrupted record at 12: " + "ab" * 45_000 + "\nmore")
    report.problem("short one")
    assert len(report.problems[0]) < 400 and "\n" not in report.problems[0]
    assert report.problems[0].startswith("shard x: corrupted record at 12: abab")
    assert report.problems[1] == "short one"
