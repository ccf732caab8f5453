"""What a converted dataset tells: the printed summary, report.html (page.py, charts.py) and
the TF-free scan behind it and `imgrec inspect` (scan.py). Reader and core only."""
