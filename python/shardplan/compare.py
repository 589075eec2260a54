"""shardplan.compare(plans): several plan or simulate results side by side, as a table (text, HTML, records, and a
pandas DataFrame where pandas is installed), with the speed-up over the first."""
import json

from . import _html
from .results import PlanResult, SimulateResult

COLUMNS = ["label", "fits", "strategy", "tensor_parallel", "micro_batch", "step_time_s", "tokens_per_s", "mfu",
           "peak_memory_gib", "speedup"]


class Comparison:
    """Rows of compare(): one dict per result, keys in COLUMNS (units in the names)."""

    def __init__(self, rows):
        self.rows = rows

    def to_dict(self):
        return {"schema": "shardplan.comparison/v1", "rows": [dict(r) for r in self.rows]}

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent)

    def to_pandas(self):
        """A pandas DataFrame (pandas is optional: ImportError names it when it is missing)."""
        try:
            import pandas
        except ImportError as error:
            raise ImportError("Comparison.to_pandas needs pandas (pip install pandas)") from error
        return pandas.DataFrame(self.rows, columns=COLUMNS)

    def __str__(self):
        texts = [[_html.cell(row.get(c)) for c in COLUMNS] for row in self.rows]
        widths = [max([len(c)] + [len(t[i]) for t in texts]) for i, c in enumerate(COLUMNS)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
        lines += ["  ".join(t.ljust(w) for t, w in zip(text, widths)) for text in texts]
        return "\n".join(lines)

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        return _html.table(self.rows, COLUMNS, title="shardplan.compare")


def _row(result, label):
    if isinstance(result, PlanResult):
        return {"label": label or result.label, "fits": result.feasible, "strategy": result.strategy,
                "tensor_parallel": result.tensor_parallel, "micro_batch": result.micro_batch,
                "step_time_s": result.step_time_s, "tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
                "peak_memory_gib": result.peak_memory_gib}
    if isinstance(result, SimulateResult):
        plan = result.document.get("plan", {})
        units = [u for u in plan.get("units", []) if not u.get("root")]
        return {"label": label or result.label, "fits": result.fits,
                "strategy": units[0]["strategy"] if units else None,
                "tensor_parallel": plan.get("tensor_parallel_degree", 1),
                "micro_batch": plan.get("training", {}).get("micro_batch"), "step_time_s": result.step_time_s,
                "tokens_per_s": result.tokens_per_s, "mfu": result.mfu, "peak_memory_gib": result.peak_memory_gib}
    raise TypeError(f"compare: expected PlanResult or SimulateResult, got {type(result).__name__}")


def compare(plans, labels=None):
    """plans: results of shardplan.plan or shardplan.simulate (a list, or a dict {label: result}). The speed-up is
    tokens/s over the first row's."""
    if isinstance(plans, dict):
        labels, plans = list(plans), list(plans.values())
    plans = list(plans)
    labels = list(labels) if labels is not None else [None] * len(plans)
    if len(labels) != len(plans):
        raise ValueError(f"compare: {len(plans)} plans but {len(labels)} labels")
    rows = [_row(p, l) for p, l in zip(plans, labels)]
    first = rows[0]["tokens_per_s"] if rows else None
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / first if first and row["tokens_per_s"] else None
    return Comparison(rows)
