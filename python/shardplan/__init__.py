"""shardplan: plan, simulate and size Fully Sharded Data Parallel training from Python.

    import shardplan
    planned = shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", seq_len=8192)
    planned.step_time_s, planned.peak_memory_gib        # typed fields, units in their names
    planned.to_dict()                                   # the document `shardplan plan --json` prints
    shardplan.compare([planned, shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", micro_batch=2)])

Every function's keywords are the CLI's flags (help(shardplan.plan)); bad input raises shardplan.InputError (a
ValueError) naming the keyword. The `shardplan` command is installed beside this package.
"""
from . import _core
from ._commands import commands as _commands
from .compare import Comparison, compare
from .results import (Baseline, CapacityPoint, CapacityResult, EstimateResult, Listing, PlanResult, Result,
                      SimulateResult)

__version__ = _core.__version__
Error = _core.Error
InputError = _core.InputError
InternalError = _core.InternalError

_functions = _commands()
estimate = _functions["estimate"]
simulate = _functions["simulate"]
plan = _functions["plan"]
capacity = _functions["capacity"]
models = _functions["models"]
gpus = _functions["gpus"]


def flag_table():
    """The CLI's planning commands and their flags, as data (what the functions' signatures are made from)."""
    return _core.flag_table()


__all__ = ["__version__", "Error", "InputError", "InternalError", "estimate", "simulate", "plan", "capacity",
           "models", "gpus", "compare", "Comparison", "flag_table", "Result", "PlanResult", "SimulateResult",
           "EstimateResult", "CapacityResult", "CapacityPoint", "Baseline", "Listing"]
