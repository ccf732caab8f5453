"""The private Apache Beam APIs imgrec uses, each wrapped here once; nowhere else imports them.

Beam has no public API for either job: its TFRecord support is the `WriteToTFRecord` /
`ReadFromTFRecord` PTransforms, not record framing on a file imgrec already holds open (the writer
streams one whole shard per DoFn call, through `GzipSink` when compressed; `verify` reads shards it
opened through FileSystems); and the parser `PipelineOptions` builds for its own flags is private.
tests/test_beam_compat.py pins what imgrec relies on, so a Beam upgrade that changes either fails
there, by name, rather than as a corrupt shard or a confusing option error.
"""

from __future__ import annotations

from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.options.pipeline_options import _BeamArgumentParser

__all__ = ["BeamArgumentParser", "read_record", "write_record"]

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
