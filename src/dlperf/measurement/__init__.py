"""Measurement on the device at hand: timing harness and peak probes."""
