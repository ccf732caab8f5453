"""Per-file image logic, no Beam: sniff, headers, Pillow, decode, transcode; check.py chains it."""
