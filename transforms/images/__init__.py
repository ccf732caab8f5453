"""Per-file image logic, no Beam, one direction: the array contract (array_contract.py), each
format's rules (dicom.py, tiff.py, png16.py), detection (sniff.py), Pillow's headers and pixels
(pillow_probe.py, headers.py), decode and transcode, the decoder subprocesses' pool
(decoder_pool.py; the subprocess itself is decode_worker.py); check.py chains it."""
