"""Measurement on the device at hand: a model run for real beside its prediction,
calibration, profiler traces, collectives (the probes and the timing harness
they use are in `hardware`)."""
