"""Versioned outputs beyond the core's format: the no-change rerun (fast_rerun.py on
rerun_stores.py) and `imgrec versions` (show.py)."""
