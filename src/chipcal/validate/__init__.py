"""Predictions checked against published measurements (the validation corpus); MLPerf lands here."""
