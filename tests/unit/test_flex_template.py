"""The Dataflow Flex Template and the Airflow DAG, checked offline (no Docker, no registry).

Every metadata.json parameter must be an option `imgrec convert` parses, carry that option's
help text, and have regexes that accept the values the docs and the DAG use; the Dockerfile
must install exactly the pinned requirements on Beam's SDK image of the pinned Beam version;
the DAG must parse without Airflow and name only real options.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from pipeline.launcher import parse_convert_args
from pipeline.options import ConvertOptions
from tests import source_ast
from tests.runs import ROOT

FLEX = ROOT / "templates" / "flex"
DAG = ROOT / "examples" / "airflow_dag.py"
DOCS = ROOT / "docs" / "scheduling.md"

# Values each parameter must accept: the defaults and the examples the docs use.
EXAMPLES = {
    "input": ["gs://my-bucket/photos/**", "s3://my-bucket/photos/*/*.jpg"],
    "manifest": ["gs://my-bucket/manifest.csv"],
    "output": ["gs://my-bucket/datasets/flowers"],
    "config": ["gs://my-bucket/configs/flowers.yaml"],
    "versioned": ["true", "false"],
    "resume": ["true", "false"],
    "dedupe": ["true", "false"],
    "no_analyze": ["true", "false"],
    "keep_versions": ["0", "7"],
    "keep_for": ["0", "36h", "7d"],
    "splits": ["train=0.9,validation=0.1", "train=0.8,validation=0.1,test=0.1"],
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    ConvertOptions._add_argparse_args(parser)
    return parser


def _help(action: argparse.Action) -> str:
    text = action.help % {"default": action.default} if "%(" in action.help else action.help
    return " ".join(text.replace("%%", "%").split())


def _metadata() -> dict:
    return json.loads((FLEX / "metadata.json").read_text())


def _flex_main():
    spec = importlib.util.spec_from_file_location("imgrec_flex_main", FLEX / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_parameter_is_a_convert_option_with_its_help_text():
    actions = {a.dest: a for a in _parser()._actions}
    params = _metadata()["parameters"]
    assert len({p["name"] for p in params}) == len(params), "a parameter is listed twice"
    for p in params:
        assert set(p) >= {"name", "label", "helpText", "regexes", "isOptional"}, p
        assert p["name"] in actions, f"{p['name']} is not an imgrec convert option"
        assert p["helpText"] == _help(actions[p["name"]]), p["name"]
        assert p["label"] and p["regexes"], p["name"]
    names = {p["name"] for p in params}
    assert {"input", "output", "versioned", "keep_versions", "resume"} <= names


def test_regexes_accept_defaults_and_examples_and_the_parser_accepts_them_too():
    actions = {a.dest: a for a in _parser()._actions}
    flex = _flex_main()
    for p in _metadata()["parameters"]:
        action = actions[p["name"]]
        values = list(EXAMPLES.get(p["name"], []))
        if isinstance(action, argparse._StoreTrueAction):
            values += ["false"]
        elif action.default not in (None, [], ""):
            values.append(str(action.default).lower() if isinstance(action.default, bool)
                          else str(action.default))  # fmt: skip
        if action.choices:
            values += list(action.choices)
        assert values, f"{p['name']}: no default or example to check its regexes with"
        for value in values:
            assert any(re.fullmatch(rx, value) for rx in p["regexes"]), (p["name"], value)
            # As the template launcher passes it: --name=value, then imgrec's own parser.
            source = (
                "--manifest=gs://b/m.csv"
                if "manifest" in (p["name"], value)
                else "--input=gs://b/x/*.jpg"
            )
            base = [source, "--output=gs://b/out", "--versioned=true"]
            if value == "annotations":  # --split_from annotations reads them
                base.append("--annotations=gs://b/instances_train.json")
            if p["name"] != "config":  # parsing --config reads the file
                parse_convert_args(flex.flex_argv([*base, f"--{p['name']}={value}"]))
    for bad in ("gs:/missing-slash", "/local/path"):
        rx = next(p for p in _metadata()["parameters"] if p["name"] == "output")["regexes"]
        assert not any(re.fullmatch(r, bad) for r in rx), bad


def test_flag_parameters_become_flags_and_dataflow_is_the_runner():
    flex = _flex_main()
    argv = flex.flex_argv(
        [
            "--input=gs://b/*.jpg",
            "--output=gs://b/o",
            "--versioned=true",
            "--resume=false",
            "--keep_versions=3",
            "--project=p",
        ]  # fmt: skip
    )
    assert argv == [
        "--input=gs://b/*.jpg", "--output=gs://b/o", "--versioned", "--keep_versions=3",
        "--project=p", "--runner=DataflowRunner",
    ]  # fmt: skip
    _, config, _ = parse_convert_args(argv)
    assert config.versioned and not config.resume and config.keep_versions == 3
    assert "--runner=DirectRunner" in flex.flex_argv(["--runner=DirectRunner"])


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            dist, _, version = line.partition("==")
            pins[re.sub(r"\[.*\]", "", dist).lower()] = version
    return pins


def test_dockerfile_installs_exactly_the_pinned_requirements_on_the_pinned_beam_image():
    text = (FLEX / "Dockerfile").read_text()
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if not ln.lstrip().startswith("#")]
    beam = _pins("requirements.txt")["apache-beam"]
    assert _pins("constraints.txt")["apache-beam"] == beam
    froms = [ln.split()[1] for ln in lines if ln.startswith("FROM ")]
    assert froms == [f"apache/beam_python3.11_sdk:{beam}"]
    installs = [
        cmd.strip()
        for ln in lines
        if ln.startswith("RUN ")
        for cmd in ln[4:].split("&&")
        if "pip install" in cmd
    ]
    assert installs == [
        "pip install --no-cache-dir -r requirements.txt -c constraints.txt",
        "pip install --no-cache-dir --no-deps .",
    ]
    copied = " ".join(ln for ln in lines if ln.startswith("COPY "))
    for needed in ("requirements.txt", "constraints.txt", "setup.py", "core", "pipeline", "transforms",
                   "templates/flex/main.py"):  # fmt: skip
        assert needed in copied, needed
    env = dict(re.match(r"ENV (\S+)=(\S+)", ln).groups() for ln in lines if ln.startswith("ENV "))
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"] == "${WORKDIR}/main.py"
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text


def _dag_options() -> tuple[ast.Module, list[str]]:
    tree = source_ast.parse(DAG.read_text(), str(DAG))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            names += [k.value for k in node.keys if isinstance(k, ast.Constant)]
    return tree, names


def test_airflow_dag_parses_without_airflow_and_names_real_options():
    tree, keys = _dag_options()
    calls = {
        n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    }
    assert calls & {"BeamRunPythonPipelineOperator", "DataflowStartFlexTemplateOperator"}
    params = {p["name"] for p in _metadata()["parameters"]}
    # The keys of the template's "parameters" mapping: each a metadata parameter.
    flex_params = _dict_keys_under(tree, "parameters")
    assert flex_params and flex_params <= params, flex_params - params
    # The Beam operator's pipeline_options: imgrec options, or Beam's own (which imgrec's
    # parser accepts too: it is the same parser).
    pipeline_options = _dict_keys_under(tree, "pipeline_options")
    imgrec_options = {a.dest for a in _parser()._actions}
    assert {"input", "output", "versioned"} <= pipeline_options & imgrec_options
    from apache_beam.options.pipeline_options import PipelineOptions

    beam_options = set(PipelineOptions([]).get_all_options())
    assert pipeline_options <= imgrec_options | beam_options, pipeline_options - beam_options
    assert keys


def _dict_keys_under(tree: ast.Module, key: str) -> set[str]:
    """Keys of every dict literal bound to `key` (a dict key or a keyword argument)."""
    found = set()
    for node in ast.walk(tree):
        values = []
        if isinstance(node, ast.Dict):
            values = [v for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value == key]  # fmt: skip
        elif isinstance(node, ast.Call):
            values = [kw.value for kw in node.keywords if kw.arg == key]
        for v in values:
            if isinstance(v, ast.Dict):
                found |= {k.value for k in v.keys if isinstance(k, ast.Constant)}
    return found


def _dag_operators(monkeypatch) -> dict[str, dict]:
    """Each operator's keyword arguments, from running the DAG file with Airflow stubbed out."""
    import sys
    import types

    made: dict[str, dict] = {}

    def operator(name):
        return lambda **kwargs: made.setdefault(name, kwargs)

    class _Dag:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    modules = {
        "airflow": {"DAG": _Dag},
        "airflow.providers.apache.beam.operators.beam": {
            "BeamRunPythonPipelineOperator": operator("beam")},
        "airflow.providers.google.cloud.operators.dataflow": {
            "DataflowConfiguration": dict,
            "DataflowStartFlexTemplateOperator": operator("flex")},
    }  # fmt: skip
    for name, attrs in modules.items():
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**attrs))
    exec(compile(DAG.read_text(), str(DAG), "exec"), {"__name__": "airflow_dag"})
    return made


def test_airflow_beam_operator_runs_imgrec_from_its_virtualenv(monkeypatch):
    beam = _dag_operators(monkeypatch)["beam"]
    # The operator runs [py_interpreter, *py_options, py_file, --option=value ...]; its default
    # interpreter, python3 from PATH, has no Beam. The clone's .venv, as docs/scheduling.md says.
    home = beam["py_interpreter"].removesuffix("/.venv/bin/python")
    assert home != beam["py_interpreter"], beam["py_interpreter"]
    assert [*beam["py_options"], beam["py_file"]] == ["-m", "pipeline"]
    assert beam["pipeline_options"]["setup_file"] == f"{home}/setup.py"
    assert (ROOT / "pipeline" / "__main__.py").exists() and (ROOT / "setup.py").exists()


def test_docs_give_the_build_and_run_commands():
    text = DOCS.read_text()
    for needed in ("gcloud dataflow flex-template build", "gcloud dataflow flex-template run",
                   "templates/flex/metadata.json", "gcloud scheduler jobs create http",
                   "examples/airflow_dag.py", "crontab", "--versioned", "--keep_versions",
                   "LATEST", "changes.json"):  # fmt: skip
        assert needed in text, needed
    # Every `--name` in the docs' imgrec commands is an option the converter parses.
    options = set(re.findall(r"imgrec convert[^\n]*(?:\n\s+[^\n]*)*", text))
    flags = set(re.findall(r"--([a-z_]+)", " ".join(options)))
    known = {a.dest for a in _parser()._actions}
    beam = {"runner", "project", "region", "temp_location", "s3_endpoint_url"}
    assert flags and flags <= known | beam, flags - known - beam


@pytest.mark.parametrize("name", ["main.py"])
def test_template_entry_point_compiles(name):
    compile((FLEX / name).read_text(), name, "exec")
