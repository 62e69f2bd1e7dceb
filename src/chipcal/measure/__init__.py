"""Measurement probes on this machine: GEMM peak, bandwidth, timings, power, host facts."""
