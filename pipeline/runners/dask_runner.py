"""Run the conversion on a Dask cluster: Beam's DaskRunner, with the fixes imgrec's pipeline needs.

Beam 2.77's `apache_beam.runners.dask.dask_runner.DaskRunner` translates a pipeline into
`dask.bag` operations, but four of its translations break this pipeline (found by running it on a
local `dask.distributed` cluster; see docs/runners.md):

1. Multi-output ParDo: every consumer of one output receives *all* outputs of the DoFn. The
   listing's dead-letter dicts reach the `Labels` lambda, which fails with
   `TypeError: string indices must be integers, not 'str'`.
2. `DoFn.finish_bundle` outputs are dropped (results are gathered before `finish_bundle` runs), so
   `BatchElements` and any DoFn that buffers lose their last batch silently.
3. Only the bag of the *last* visited transform is computed; branches that do not feed it never
   run.
4. A side input is computed *inside* each consuming task with Dask's local scheduler: the whole
   upstream graph (listing, decoding) is rerun once per partition that reads it.
Two more came from Dask itself (2026.8): an `Item` passed to `map_partitions`, or several
collections optimized one by one, have their shared upstream fused under new names and rerun
(TFT then wrote its saved model twice and failed `assert saved_model_dir == ...`).

`DaskRunner` here keeps Beam's Dask options, client and result, and replaces the translation:
outputs are kept per tag, `finish_bundle` outputs are collected, every leaf is computed, and side
inputs are computed once by the cluster and handed to the tasks that read them. Metrics are not
collected on Dask (Beam's result raises NotImplementedError); `metrics()` answers empty results.
Workers must import imgrec (run them with the same virtualenv and PYTHONPATH; run_dask.sh does).
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam import DoFn, pvalue
from apache_beam.internal import pickler
from apache_beam.metrics.metric import MetricResults
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from core.errors import ERROR_PREFIX
from pipeline.options import OptionError

__all__ = [
    "BEAM_DASK_RUNNER",
    "DASK_RUNNER",
    "DaskRunner",
    "is_dask",
    "register_dask_options",
    "runner_in_argv",
]

BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DASK_RUNNER = "pipeline.runners.dask_runner.DaskRunner"
# What a user may write after --runner to mean Dask: Beam's short name is not registered by Beam
# itself (it only resolves module paths for non-built-in runners), so imgrec maps it.
_DASK_NAMES = {"daskrunner", "dask", BEAM_DASK_RUNNER.lower(), DASK_RUNNER.lower()}
# The pins imgrec is tested with (requirements.txt); named in the "not installed" error.
_INSTALL_HINT = "pip install dask==2026.8.0 distributed==2026.8.0"


# Partitions per worker thread after a Reshuffle: several, so a slow partition (large images)
# does not leave the other workers idle at the end, few enough that per-task overhead (a DoFn
# setup per partition and stage) stays small next to the work. --dask_npartitions overrides.
_PARTITIONS_PER_THREAD = 4
# Partitions of a beam.Create of many values (imgrec's own Creates hold one value).
_CREATE_PARTITIONS = 16


def is_dask(runner: str | None) -> bool:
    """Whether a --runner value names the Dask runner (short name or module path)."""
    return bool(runner) and str(runner).lower() in _DASK_NAMES


def runner_in_argv(argv: list[str]) -> str | None:
    """The last --runner value in argv (`--runner X` or `--runner=X`), or None."""
    found = None
    for i, a in enumerate(argv):
        if a == "--runner" and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith("--runner="):
            found = a.split("=", 1)[1]
    return found


def register_dask_options() -> None:
    """Import Beam's Dask module so its options (--dask_client_address, ...) parse.

    Raises:
        OptionError: dask or distributed is not installed.
    """
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401
        import dask.distributed  # noqa: F401
    except ImportError as e:
        raise OptionError(
            f"--runner DaskRunner: dask.distributed is not installed ({e}); {_INSTALL_HINT}"
        ) from e


class _NoMetrics(MetricResults):
    """Dask collects no Beam metrics: every query answers empty lists."""

    def query(self, filter=None):  # noqa: A002 - Beam's parameter name
        return {
            name: [] for name in (self.COUNTERS, self.DISTRIBUTIONS, self.GAUGES, self.STRINGSETS)
        }


# ----------------------------------------------------------------------------------------------
# Task functions: module level, so Dask pickles them by reference (workers import imgrec).


def _global(value):
    return WindowedValue(value, 0, (GlobalWindow(),))


def _run_dofn_partition(items, spec: dict, *side_values):
    """Run one DoFn over one partition; returns [(tag, value)] including finish_bundle output."""
    out: list = []

    class _Collect(Receiver):
        def __init__(self, tag):
            self.tag = tag

        def receive(self, windowed_value):
            out.append((self.tag, windowed_value.value))

    class _Tagged(dict):
        def __missing__(self, tag):
            self[tag] = _Collect(tag)
            return self[tag]

    receivers = _Tagged()
    side_inputs = [
        SideInputMap(view_class, view_options, [_global(v) for v in values])
        for (view_class, view_options), values in zip(spec["side_views"], side_values, strict=True)
    ]
    invoker = DoFnInvoker.create_invoker(
        # A fresh DoFn per task: Dask hands the same deserialized `spec` to every task of a
        # worker, and DoFns keep per-instance state (TFT caches its graph on the instance).
        DoFnSignature(pickler.loads(spec["fn"])),
        _dofn_output_handler(spec["window_fn"], receivers[None], receivers),
        context=DoFnContext(spec["label"], state=None),
        side_inputs=side_inputs,
        input_args=list(spec["args"]),
        input_kwargs=dict(spec["kwargs"]),
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(_global(item))
    invoker.invoke_finish_bundle()  # Its outputs land in `out` too (Beam's drops them).
    invoker.invoke_teardown()
    return out


def _select(pairs, tag):
    return [v for t, v in pairs if t == tag]


def _concat_partitions(parts):
    return [x for p in parts for x in p]


def _group_value(item):
    key, pairs = item
    return key, [wv.value for _, wv in pairs]  # ReifyWindows made (key, WindowedValue)


def _count(items):
    return [sum(1 for _ in items)]


def _first(item):
    return item[0]


@dataclasses.dataclass
class _Translator(beam.pipeline.PipelineVisitor):
    """Each leaf transform -> dask.bag operations; bags are kept per PCollection (per tag)."""

    bag_kwargs: dict
    reshuffle_partitions: int
    bags: dict = dataclasses.field(default_factory=dict)  # PCollection -> Bag
    consumed: set = dataclasses.field(default_factory=set)

    def _input(self, pcoll):
        if pcoll not in self.bags:
            raise NotImplementedError(f"DaskRunner: no bag for {pcoll} (unsupported producer)")
        self.consumed.add(pcoll)
        return self.bags[pcoll]

    def visit_transform(self, node) -> None:
        from apache_beam.runners.dask import overrides
        from dask import bag as db

        transform = node.transform
        inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        outputs = list(node.outputs.items())
        if isinstance(transform, overrides._Create):
            values = list(transform.values)
            npart = self.bag_kwargs.get("npartitions")
            size = self.bag_kwargs.get("partition_size")
            if not npart and not size:  # About 16 partitions; Beam's default is 128 values each.
                size = max(1, len(values) // _CREATE_PARTITIONS)
            bag = db.from_sequence(
                values, npartitions=npart, partition_size=None if npart else size
            )
        elif isinstance(transform, overrides._Flatten):
            bags = [self._input(i) for i in inputs]
            bag = db.concat(bags) if bags else db.from_sequence([], npartitions=1)
        elif isinstance(transform, overrides._GroupByKeyOnly):
            bag = self._input(inputs[0]).groupby(_first, shuffle="tasks").map(_group_value)
        elif isinstance(transform, overrides._GroupAlsoByWindow):
            bag = self._input(inputs[0])  # Global window only: grouping is already done.
        elif isinstance(transform, overrides._Reshuffle):
            # Beam's translation is the identity, so one Create element (the listing's) keeps
            # the whole job in one partition, on one worker. Spread it instead.
            bag = self._input(inputs[0]).repartition(npartitions=self.reshuffle_partitions)
        elif type(transform) is beam.ParDo:
            self._pardo(node, inputs, outputs)
            return
        elif not outputs or all(isinstance(o, pvalue.PDone) for _, o in outputs):
            return
        elif len(inputs) == 1 and len(outputs) == 1:
            bag = self._input(inputs[0])  # Identity leaves (e.g. type-hint no-ops).
        else:
            raise NotImplementedError(
                f"DaskRunner: transform {node.full_label!r} ({type(transform).__name__}) has no "
                "Dask translation"
            )
        for _, out in outputs:
            self.bags[out] = bag

    def _pardo(self, node, inputs, outputs) -> None:
        transform = node.transform
        main = inputs[0]
        side_views, side_bags = [], []
        for si in node.side_inputs:
            side_views.append((type(si), si._view_options()))
            source = self._input(si.pvalue)
            # Computed once on the cluster; every task reading it gets the whole list. An Item
            # argument is turned into a delayed with its graph optimized (fused) on its own,
            # which renames and reruns everything upstream once per reader: keep it unfused.
            whole = source.reduction(list, _concat_partitions)
            side_bags.append(whole.to_delayed(optimize_graph=False))
        # Side inputs in args/kwargs are placeholders the invoker fills, in side_inputs order.
        args, kwargs = transform.args, transform.kwargs
        spec = {
            "fn": pickler.dumps(transform.fn),
            "label": transform.label,
            "window_fn": main.windowing.windowfn if hasattr(main, "windowing") else None,
            "side_views": side_views,
            "args": args,
            "kwargs": kwargs,
        }
        pairs = self._input(main).map_partitions(_run_dofn_partition, spec, *side_bags)
        for tag, out in outputs:
            self.bags[out] = pairs.map_partitions(_select, tag)

    def leaves(self) -> list:
        """Bags nobody consumes: computing them computes the whole graph."""
        return [b for pc, b in self.bags.items() if pc not in self.consumed]


class DaskRunner(PipelineRunner):
    """Beam's DaskRunner (same options and client) with imgrec's translation fixes."""

    def run_pipeline(self, pipeline, options):
        import dask.distributed as ddist
        from apache_beam.runners.dask.dask_runner import DaskOptions
        from apache_beam.runners.dask.overrides import dask_overrides
        from dask import bag as db

        dask_options = options.view_as(DaskOptions).get_all_options(
            drop_default=True, current_only=True
        )
        bag_kwargs = _pop_dask_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        pipeline.replace_all(dask_overrides())
        threads = sum(client.nthreads().values()) or 1
        spread = bag_kwargs.get("npartitions") or _PARTITIONS_PER_THREAD * threads
        translator = _Translator(bag_kwargs, spread)
        pipeline.visit(translator)
        # One collection over every leaf, so Dask optimizes one graph: optimizing leaves one by
        # one fuses a shared step into each leaf's graph under new names and runs it once per
        # leaf (TFT's saved model was written twice, into two folders). Counts come back, not data.
        done = db.concat([leaf.map_partitions(_count) for leaf in translator.leaves()]).sum()
        return _result_class()(client, [client.compute(done)])


def _result_class():
    """Beam's DaskRunnerResult, answering empty metrics instead of NotImplementedError."""
    from apache_beam.runners.dask.dask_runner import DaskRunnerResult
    from distributed import KilledWorker

    class _Result(DaskRunnerResult):
        def wait_until_finish(self, duration=None):
            try:
                return super().wait_until_finish(duration)
            except KilledWorker as e:
                # Dask retried the task on other workers (distributed.scheduler.allowed-failures)
                # and each died; shards already renamed into place are whole, so --resume works.
                raise RuntimeError(
                    f"{ERROR_PREFIX}Dask workers died while running one task ({e.task}); see "
                    "the worker logs (memory limit?), then rerun with --resume to keep finished "
                    "shards"
                ) from e
            finally:
                self.client.close()

        def metrics(self):
            return _NoMetrics()

    return _Result


# Beam's own runners run DoFns with these private pieces; Dask runs only.
def _dofn_output_handler(window_fn, main_receivers, tagged_receivers):
    """Beam's router of a DoFn's outputs to receivers, for a DoFn run outside a Beam worker."""
    from apache_beam.runners.common import _OutputHandler

    return _OutputHandler(
        window_fn=window_fn,
        main_receivers=main_receivers,
        tagged_receivers=tagged_receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )


def _pop_dask_bag_kwargs(dask_options: dict) -> dict:
    """The dask.Bag arguments among DaskOptions' values, removed from `dask_options`."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return DaskOptions._extract_bag_kwargs(dask_options)
