"""The private Apache Beam APIs imgrec uses, each wrapped here once; nowhere else imports them.

Beam has no public API for these jobs: its TFRecord support is the `WriteToTFRecord` /
`ReadFromTFRecord` PTransforms, not record framing on a file imgrec already holds open (the writer
streams one whole shard per DoFn call, through `GzipSink` when compressed; `verify` reads shards it
opened through FileSystems); the parser `PipelineOptions` builds for its own flags is private; and
pipeline/dask_runner.py runs DoFns the way Beam's own runners do, with three private pieces of
theirs (the output router, a side input's view options, DaskOptions' bag arguments).
tests/unit/test_beam_compat.py pins what imgrec relies on, so a Beam upgrade that changes one fails
there, by name, rather than as a corrupt shard, a confusing option error or a broken Dask run.
"""

from __future__ import annotations

from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.options.pipeline_options import _BeamArgumentParser

__all__ = [
    "BeamArgumentParser",
    "dofn_output_handler",
    "pop_dask_bag_kwargs",
    "read_record",
    "side_input_view",
    "write_record",
]

# TFRecord framing (length, masked crc32c of the length, data, masked crc32c of the data) with
# Beam's fast crc32c, bound once (the writer calls it per record, ~5 us with the crc):
# write_record(file, data: bytes) -> None appends one record to `file`;
# read_record(file) -> bytes | None is the next record's data, None at the end; it raises
# ValueError on a damaged length or data checksum.
write_record = _TFRecordUtil.write_record
read_record = _TFRecordUtil.read_record

# The argparse.ArgumentParser subclass PipelineOptions parses with: it adds
# add_value_provider_argument, which some of Beam's own option classes call in
# _add_argparse_args. The launcher parses every registered option class with a subclass of it.
BeamArgumentParser = _BeamArgumentParser


def dofn_output_handler(window_fn, main_receivers, tagged_receivers):
    """Beam's router of a DoFn's outputs to receivers (`apache_beam.runners.common._OutputHandler`),
    for a DoFn run outside a Beam worker: no output counter, no batched outputs."""
    from apache_beam.runners.common import _OutputHandler  # Dask runs only.

    return _OutputHandler(
        window_fn=window_fn,
        main_receivers=main_receivers,
        tagged_receivers=tagged_receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )


def side_input_view(side_input) -> tuple[type, dict]:
    """(view class, view options) of a side input (AsList, AsSingleton, ...): what
    `apache_beam.transforms.sideinputs.SideInputMap` rebuilds the view from."""
    return type(side_input), side_input._view_options()


def pop_dask_bag_kwargs(dask_options: dict) -> dict:
    """The dask.Bag arguments (npartitions, partition_size) among DaskOptions' values, removed
    from `dask_options` (what is left configures the dask.distributed Client)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions  # Dask runs only.

    return DaskOptions._extract_bag_kwargs(dask_options)
