"""Analysis -> plan -> apply -> diff: the rewrite of device-read constants, on top of ``pte_devconst.schema``."""

from .analysis import Analysis, ConstantVerdict, MethodAnalysis, analyze_program
from .plan import RewriteOptions, RewritePlan, make_plan
from .rewrite import RewriteResult, analyze_file, default_output, rewrite_file

__all__ = ["Analysis", "ConstantVerdict", "MethodAnalysis", "analyze_program", "RewriteOptions", "RewritePlan",
           "make_plan", "RewriteResult", "analyze_file", "default_output", "rewrite_file"]
