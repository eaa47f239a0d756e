"""Terminal rendering with rich, one module per kind of report; each
renderer takes a result and prints it, computing nothing."""

from .advice import advice_report, applied_report, rules_document, rules_table
from .analysis import analysis_report
from .catalog import gemm_report, gpus_document, gpus_table, spec_document, spec_report
from .compare import compare_report
from .configs import explain_config, models_table
from .files import sweeps_list, written
from .format import gib, seconds
from .measurement import calibration_document, calibration_report, measure_report, trace_report
from .memory import memory_report
from .parallel import comm_report, plan_report, run_choices
from .serve import serve_report
from .simulate import simulation_report

__all__ = [
    "advice_report",
    "analysis_report",
    "applied_report",
    "calibration_document",
    "compare_report",
    "spec_document",
    "spec_report",
    "explain_config",
    "models_table",
    "calibration_report",
    "comm_report",
    "gemm_report",
    "gib",
    "gpus_document",
    "gpus_table",
    "measure_report",
    "memory_report",
    "plan_report",
    "run_choices",
    "rules_document",
    "rules_table",
    "seconds",
    "serve_report",
    "simulation_report",
    "sweeps_list",
    "trace_report",
    "written",
]
