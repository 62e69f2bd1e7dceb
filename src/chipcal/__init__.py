"""chipcal: measure AI hardware, model it from physics, calibrate the model to the measurements.

Rooms, each importing only the rooms before it (ARCHITECTURE.md; tests/test_layering.py checks it):
model (physics, registry, workloads, prediction) <- measure (probes on this machine) <- calibrate
(running a calibration and fitting the model; its documents) <- report (documents read back) and
validate (predictions against published measurements) <- cli (arguments and printing).
"""
