"""Calibration documents read back: the run report (markdown, HTML, plots), the results index, two runs compared."""
