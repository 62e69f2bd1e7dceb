"""What is shown to a reader: calibration documents read back (the run report in markdown and HTML,
its plots, the results index, two runs compared) and the tables and plots of predictions and of
the TDP model, built from the records the lower rooms return."""
