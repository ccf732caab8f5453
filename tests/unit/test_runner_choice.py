"""The launcher's default DirectRunner set-up: in-process for small inputs, processes for large."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import DirectOptions, SetupOptions

from pipeline import launcher
from pipeline.launch import choose


def _configure(
    tmp_path, argv_extra: list[str], num_files: int, monkeypatch, cores: int = 2, forked=False
):
    monkeypatch.setattr(choose.os, "cpu_count", lambda: cores)
    (tmp_path / "in").mkdir(exist_ok=True)
    argv = ["--input", str(tmp_path / "in" / "*.jpg"), "--output", str(tmp_path / "out")]
    argv += argv_extra
    options, config, argv = launcher.parse_convert_args(argv)
    config = choose.configure_runner(options, argv, config, num_files, forked)
    direct = options.view_as(DirectOptions)
    return direct.direct_num_workers, direct.direct_running_mode, config.decode_threads


@pytest.mark.parametrize(
    "num_files, expected",
    [
        (1, (1, "in_memory", 2)),
        (choose.AUTO_PROCESSES_MIN_FILES - 1, (1, "in_memory", 2)),
        (choose.AUTO_PROCESSES_MIN_FILES, (2, "multi_processing", 1)),
    ],
)
def test_default_workers_follow_the_input_size(tmp_path, monkeypatch, num_files, expected):
    assert _configure(tmp_path, [], num_files, monkeypatch) == expected


@pytest.mark.parametrize(
    "num_files, expected",
    [
        (choose.FORKED_PROCESSES_MIN_FILES - 1, (1, "in_memory", 2)),
        (choose.FORKED_PROCESSES_MIN_FILES, (2, "multi_processing", 1)),
    ],
)
def test_forked_workers_lower_the_threshold(tmp_path, monkeypatch, num_files, expected):
    """Where the command forks its workers ready-imported (pipeline/launch/forked_workers.py),
    worker processes pay off from FORKED_PROCESSES_MIN_FILES files on."""
    assert _configure(tmp_path, [], num_files, monkeypatch, forked=True) == expected


def test_explicit_workers_win_over_the_input_size(tmp_path, monkeypatch):
    assert _configure(tmp_path, ["--workers", "2"], 5, monkeypatch) == (2, "multi_processing", 1)
    assert _configure(tmp_path, ["--workers", "1"], 10**6, monkeypatch) == (1, "in_memory", 2)


def test_worker_processes_import_the_stages_at_start_up(tmp_path, monkeypatch):
    """Worker processes get the start-up plugin (pipeline/launch/worker_start.py), after any the user
    gave; an in-process run has no worker process to give it to."""
    argv = ["--input", str(tmp_path / "*.jpg"), "--output", str(tmp_path / "out")]
    for extra, plugins in [
        (["--workers", "2"], [choose.WORKER_START_PLUGIN]),
        (
            ["--workers", "2", "--beam_plugins", "my.plugin"],
            ["my.plugin", "pipeline.launch.worker_start"],
        ),
        (["--workers", "1"], None),
    ]:
        options, config, args = launcher.parse_convert_args(argv + extra)
        choose.configure_runner(options, args, config, 5)
        assert options.view_as(SetupOptions).beam_plugins == plugins, extra


def test_preflight_counts_inputs_up_to_the_cap(tmp_path):
    for i in range(7):
        (tmp_path / f"{i}.jpg").write_bytes(b"x")
    options, config, _ = launcher.parse_convert_args(
        ["--input", str(tmp_path / "*.jpg"), "--output", str(tmp_path / "out")]
    )
    assert launcher.preflight(config, count_up_to=100) == 7
    assert launcher.preflight(config, count_up_to=3) == 3
    assert launcher.preflight(config) == 1


@pytest.mark.parametrize(
    "argv_extra, direct",
    [
        ([], True),
        (["--runner", "DirectRunner"], True),
        (["--runner", "direct"], True),
        (["--runner", "SwitchingDirectRunner"], True),
        (["--runner", "apache_beam.runners.direct.direct_runner.DirectRunner"], True),
        (["--runner", "BundleBasedDirectRunner"], False),
        (["--runner", "PrismRunner"], False),
    ],
)
def test_beams_direct_runner_runs_without_prism(tmp_path, monkeypatch, argv_extra, direct):
    """Beam's DirectRunner (the default, or named) is built as imgrec's, which never tries
    Prism; the options still name DirectRunner. Other runners are Beam's, as named."""
    from apache_beam.options.pipeline_options import StandardOptions

    from pipeline.builder import build_pipeline
    from pipeline.runners import direct as direct_runner

    if argv_extra:  # the runner is chosen before any stage is added: the default builds them all
        monkeypatch.setattr("pipeline.builder.add_convert", lambda *unused: None)
    (tmp_path / "in").mkdir()
    argv = ["--input", str(tmp_path / "in" / "*.jpg"), "--output", str(tmp_path / "out")]
    options, config, args = launcher.parse_convert_args([*argv, *argv_extra])
    config = choose.configure_runner(options, args, config, 1)
    p = build_pipeline(config, options, {"argv": args})
    assert isinstance(p.runner, direct_runner.DirectRunner) is direct
    if not argv_extra:
        assert options.view_as(StandardOptions).runner == "DirectRunner"  # as provenance says


@pytest.mark.parametrize("made_by", ["command", "script"])
@pytest.mark.parametrize("env, inferred", [(None, False), ("1", True)])
def test_the_pipeline_is_built_without_beams_type_inference(
    tmp_path, monkeypatch, env, inferred, made_by
):
    """Beam infers each transform's output type from its function's bytecode while a pipeline is
    built (~1 s of CPU per small conversion); the builder turns that off
    (pipeline/builder.py build_pipeline) unless IMGREC_BEAM_TYPE_INFERENCE=1, in options the
    command line parsed and in options a script or test made itself (`PipelineOptions(args)`:
    those kept Beam's inference until 2026-12-04, so the tests that build the job directly did not
    run what the command runs)."""
    from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions
    from apache_beam.typehints import trivial_inference

    from pipeline.builder import build_pipeline
    from pipeline.launch.services import LocalServices
    from pipeline.launch.switches import read_switches
    from pipeline.options import ConvertConfig

    switches = read_switches({} if env is None else {"IMGREC_BEAM_TYPE_INFERENCE": env})
    calls = []
    inner = trivial_inference.infer_return_type
    monkeypatch.setattr(
        trivial_inference,
        "infer_return_type",
        lambda *a, **k: calls.append(a[0]) or inner(*a, **k),
    )
    (tmp_path / "in").mkdir()
    argv = ["--input", str(tmp_path / "in" / "*.jpg"), "--output", str(tmp_path / "out")]
    if made_by == "command":
        options, config, args = launcher.parse_convert_args([*argv, "--no_analyze"])
        config = choose.configure_runner(options, args, config, 1)
    else:
        args = [*argv, "--no_analyze", "--direct_num_workers", "1"]
        options = PipelineOptions([*args, "--direct_running_mode", "in_memory"])
        config = ConvertConfig.from_options(options)
    build_pipeline(config, options, {"argv": args}, services=LocalServices(switches))
    assert options.view_as(TypeOptions).pipeline_type_check is inferred
    assert bool(calls) is inferred, calls[:5]
