"""Hardware specs: the bundled catalogue, user spec files, and the local CPU."""

from .catalog import gpu, gpus, resolve_id
from .spec import Efficiency, HardwareSpec, MathUnit, load_spec_file

__all__ = ["Efficiency", "HardwareSpec", "MathUnit", "gpu", "gpus", "load_spec_file", "resolve_id"]
