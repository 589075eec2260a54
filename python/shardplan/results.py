"""Result objects: the headline figures of a command's --json document as typed fields with units in their names
(bytes as *_gib, times as *_s), the whole document kept (`.to_dict()`, `.to_json()`, and read-only `result["key"]`
as before), and `_repr_html_` for notebooks."""
import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Dict, List, Optional

from . import _html

GIB = 1024 ** 3


def gib(value):
    """Bytes as GiB (None stays None)."""
    return None if value is None else value / GIB


@dataclasses.dataclass(eq=False, repr=False)
class Result(Mapping):
    """A command's document. Fields hold the headline figures; `document` is what `shardplan <command> --json` prints."""

    document: Dict[str, Any]

    def __getitem__(self, key):
        return self.document[key]

    def __iter__(self):
        return iter(self.document)

    def __len__(self):
        return len(self.document)

    def to_dict(self):
        """The --json document (a deep copy)."""
        return copy.deepcopy(self.document)

    def to_json(self, indent=2):
        """The --json document as text."""
        return json.dumps(self.document, indent=indent, sort_keys=True)

    def summary(self):
        """The fields without the document: {name: value}."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "document"}

    def __repr__(self):
        shown = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v!r}"
                          for k, v in self.summary().items() if not isinstance(v, (list, dict)))
        return f"{type(self).__name__}({shown})"

    def _repr_html_(self):
        rows = [{"field": k, "value": v} for k, v in self.summary().items() if not isinstance(v, (list, dict))]
        return _html.table(rows, ["field", "value"], title=type(self).__name__)


def _memory_gib(memory):
    """{"activations_bytes": n, ...} -> {"activations": GiB, ...} (the categories at the peak)."""
    return {k[:-len("_bytes")]: gib(v) for k, v in (memory or {}).items() if k.endswith("_bytes")}


@dataclasses.dataclass(eq=False, repr=False)
class Baseline:
    """One of FSDP's default wrappings `plan` compares its plan with."""

    name: str
    fits: bool
    step_time_s: float
    tokens_per_s: float
    peak_memory_gib: float
    planned_speedup: Optional[float]

    def __repr__(self):
        return f"Baseline({self.name!r}, step_time_s={self.step_time_s:.4g}, fits={self.fits})"


@dataclasses.dataclass(eq=False, repr=False)
class PlanResult(Result):
    """`shardplan.plan`: the fastest plan that fits (feasible) or why nothing fits (diagnosis)."""

    label: str
    feasible: bool
    knobs: Optional[str]
    strategy: Optional[str]
    tensor_parallel: int
    expert_parallel: int
    micro_batch: Optional[int]
    grad_accumulation_steps: Optional[int]
    seq_len: Optional[int]
    units: int
    step_time_s: Optional[float]
    tokens_per_s: Optional[float]
    mfu: Optional[float]
    peak_memory_gib: Optional[float]
    device_peak_gib: Optional[float]
    memory_cap_gib: float
    memory_at_peak_gib: Dict[str, float]
    baselines: List[Baseline]
    diagnosis: Optional[Dict[str, Any]]

    @classmethod
    def from_document(cls, document, label):
        plan = document.get("plan") or {}
        training = plan.get("training") or {}
        predicted = document.get("predicted") or {}
        units = plan.get("units") or []
        block_units = [u for u in units if not u.get("root")]
        baselines = [Baseline(b["name"], b["fits"], b["step_time_s"], b["tokens_per_s"], gib(b["peak_memory_bytes"]),
                              b.get("planned_speedup")) for b in document.get("baselines", [])]
        return cls(document=document, label=label, feasible=document["feasible"], knobs=document.get("knobs"),
                   strategy=block_units[0]["strategy"] if block_units else None,
                   tensor_parallel=plan.get("tensor_parallel_degree", 1),
                   expert_parallel=plan.get("expert_parallel_degree", 1),
                   micro_batch=training.get("micro_batch"),
                   grad_accumulation_steps=training.get("grad_accumulation_steps"), seq_len=training.get("seq_len"),
                   units=len(block_units), step_time_s=predicted.get("step_time_s"),
                   tokens_per_s=predicted.get("tokens_per_s"), mfu=predicted.get("mfu"),
                   peak_memory_gib=gib(predicted.get("peak_memory_bytes")),
                   device_peak_gib=gib(predicted.get("device_peak_bytes")),
                   memory_cap_gib=gib(document["memory_cap_bytes"]),
                   memory_at_peak_gib=_memory_gib(predicted.get("memory_at_peak")), baselines=baselines,
                   diagnosis=document.get("diagnosis"))

    @property
    def plan(self):
        """The plan document (shardplan.plan/v1), as `shardplan.simulate(plan=...)` and `--plan` take it."""
        return self.document.get("plan")

    def _repr_html_(self):
        head = _html.table([self.summary()], ["label", "feasible", "strategy", "tensor_parallel", "micro_batch",
                                              "units", "step_time_s", "tokens_per_s", "mfu", "peak_memory_gib"],
                           title=f"plan: {self.label}")
        if not self.feasible:
            reasons = "".join(f"<li>{_html.html.escape(s)}</li>" for s in (self.diagnosis or {}).get("suggestions", []))
            return head + f"<p>Nothing fits.</p><ul>{reasons}</ul>"
        bar = _html.memory_bar(self.memory_at_peak_gib, self.memory_cap_gib)
        rows = [dataclasses.asdict(b) for b in self.baselines]
        return head + bar + _html.table(rows, ["name", "fits", "step_time_s", "tokens_per_s", "peak_memory_gib",
                                               "planned_speedup"], title="FSDP baselines")


@dataclasses.dataclass(eq=False, repr=False)
class SimulateResult(Result):
    """`shardplan.simulate`: one simulated step of a plan."""

    label: str
    fits: bool
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    compute_time_s: float
    exposed_comm_s: float
    peak_memory_gib: float
    device_peak_gib: float
    memory_capacity_gib: float
    memory_at_peak_gib: Dict[str, float]

    @classmethod
    def from_document(cls, document, label):
        d = document
        return cls(document=d, label=label, fits=d["fits"], step_time_s=d["step_time_s"],
                   tokens_per_s=d["tokens_per_s"], mfu=d["mfu"], hfu=d["hfu"], compute_time_s=d["compute_time_s"],
                   exposed_comm_s=d["exposed_comm_s"], peak_memory_gib=gib(d["peak_memory_bytes"]),
                   device_peak_gib=gib(d["device_peak_bytes"]), memory_capacity_gib=gib(d["memory_capacity_bytes"]),
                   memory_at_peak_gib=_memory_gib(d.get("memory_at_peak")))

    def _repr_html_(self):
        return (_html.table([self.summary()], ["label", "fits", "step_time_s", "tokens_per_s", "mfu",
                                               "peak_memory_gib"], title=f"simulated: {self.label}")
                + _html.memory_bar(self.memory_at_peak_gib, self.memory_capacity_gib))


@dataclasses.dataclass(eq=False, repr=False)
class EstimateResult(Result):
    """`shardplan.estimate`: per-rank memory at the step's peak."""

    label: str
    params: int
    trainable_params: int
    fits: bool
    dominant_term: str
    device_peak_gib: float
    capacity_gib: float
    model_states_gib: float
    memory_at_peak_gib: Dict[str, float]

    @classmethod
    def from_document(cls, document, label):
        memory = document["memory"]
        categories = {k: v for k, v in _memory_gib(memory).items()
                      if k not in ("capacity", "device_peak", "memory_headroom", "model_states", "reserved_peak",
                                   "total")}
        return cls(document=document, label=label, params=document["params"],
                   trainable_params=document["trainable_params"], fits=memory["fits"],
                   dominant_term=memory["dominant_term"], device_peak_gib=gib(memory["device_peak_bytes"]),
                   capacity_gib=gib(memory["capacity_bytes"]), model_states_gib=gib(memory["model_states_bytes"]),
                   memory_at_peak_gib=categories)

    def _repr_html_(self):
        return (_html.table([self.summary()], ["label", "params", "fits", "dominant_term", "device_peak_gib",
                                               "capacity_gib"], title=f"estimate: {self.label}")
                + _html.memory_bar(self.memory_at_peak_gib, self.capacity_gib))


@dataclasses.dataclass(eq=False, repr=False)
class CapacityPoint:
    """One GPU type and count of a capacity sweep."""

    gpu: str
    gpus: int
    nodes: int
    fits: bool
    practical: Optional[bool]
    limit: Optional[str]
    step_time_s: Optional[float]
    tokens_per_s: Optional[float]
    mfu: Optional[float]
    days: Optional[float]
    cost_usd: Optional[float]
    peak_memory_gib: Optional[float]

    def __repr__(self):
        return f"CapacityPoint({self.gpus}x{self.gpu}, fits={self.fits}, days={self.days})"


@dataclasses.dataclass(eq=False, repr=False)
class CapacityResult(Result):
    """`shardplan.capacity`: GPU types x counts, the smallest that fits and is practical per type."""

    label: str
    points: List[CapacityPoint]
    smallest_fitting_gpus: Dict[str, Any]
    smallest_practical_gpus: Dict[str, Any]

    @classmethod
    def from_document(cls, document, label):
        points = [CapacityPoint(p["gpu"], p["gpus"], p["nodes"], p["fits"], p.get("practical"), p.get("limit"),
                                p.get("step_time_s"), p.get("tokens_per_s"), p.get("mfu"), p.get("days"),
                                p.get("cost_usd"), gib(p.get("peak_memory_bytes"))) for p in document["points"]]
        return cls(document=document, label=label, points=points,
                   smallest_fitting_gpus=document["smallest_fitting_gpus"],
                   smallest_practical_gpus=document["smallest_practical_gpus"])

    def _repr_html_(self):
        return _html.table([dataclasses.asdict(p) for p in self.points],
                           ["gpu", "gpus", "fits", "practical", "limit", "step_time_s", "tokens_per_s", "mfu", "days",
                            "cost_usd", "peak_memory_gib"], title=f"capacity: {self.label}")


@dataclasses.dataclass(eq=False, repr=False)
class Listing(Result):
    """`shardplan.models` / `shardplan.gpus`: the rows of the listing."""

    label: str
    rows: List[Dict[str, Any]]

    @classmethod
    def from_document(cls, document, label):
        key = "models" if "models" in document else "gpus"
        return cls(document=document, label=label, rows=document.get(key, []))

    def _repr_html_(self):
        columns = [k for k in (self.rows[0] if self.rows else {}) if not isinstance(self.rows[0][k], (dict, list))]
        return _html.table(self.rows, columns, title=self.label)
