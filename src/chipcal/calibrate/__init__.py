"""Running a calibration and fitting the model to it; the calibration document it writes."""
