"""Predictions checked against published measurements: the validation corpus (corpus.py, its
splits, tables and plot); MLPerf lands here."""
