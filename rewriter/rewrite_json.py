"""The JSON form of a rewrite (``RewriteResult.to_json``): one document per program, cli/report.schema.json.

Kept apart from ``rewrite.py`` so the pipeline reads as a pipeline; everything here is a pure view of the
result and its plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pte_devconst.util.jsonable import to_jsonable
from pte_devconst.program.labels import value_name

from .encodings import report_fields


if TYPE_CHECKING:
    from .model.analysis import ConstantVerdict, MethodAnalysis
    from .plan import FoldPlacement, RewritePlan
    from .rewrite import RewriteResult


def names_json(names: Any) -> Optional[dict[str, Any]]:
    """Where the constants' names came from (``--etrecord``), how many it named and how many it could not."""
    if names is None:
        return None
    return {"source": names.source, "named": names.count, "unnamed": names.unnamed,
            "named_inputs": names.inputs_named, "named_outputs": names.outputs_named, "notes": list(names.notes)}


def left_in_place(plan: "RewritePlan", method: "MethodAnalysis") -> list["ConstantVerdict"]:
    """The constants a rewrite leaves on the host: not eligible, and (with fold) not a source of a folded chain
    or moved once its kernels went."""
    handled = {f.chain.source for f in plan.folds if f.plan_index == method.plan_index}
    handled |= {p.value for p in plan.placements if p.plan_index == method.plan_index}
    return [c for c in method.constants if not c.eligible and c.value not in handled]


def fold_json(fold: "FoldPlacement") -> dict[str, Any]:
    """One folded chain (or device copy of a shared constant)."""
    chain = fold.chain
    return {"value": fold.value, "new_value": fold.appended, "result": chain.result, "source": chain.source,
            "source_name": value_name(chain.source_tensor.fqn, chain.source), "duplicate": chain.duplicate,
            "kernels": [{"kernel": s.kernel, "chain": s.chain, "instruction": s.instruction, "output": s.output}
                        for s in chain.steps],
            "device": chain.device, "delegates": list(chain.delegates), "nbytes": fold.nbytes,
            "memory_id": fold.memory_id, "offset": fold.offset, "initial_data_index": fold.initial_data_index,
            "external_key": fold.external_key, "copies_per_call_removed": chain.copies_per_call,
            "bytes_per_call_saved": fold.bytes_per_call,
            "instructions_removed": [{"chain": c, "instruction": k} for c, k in fold.removed],
            "host_keeps": list(chain.stays)}


def _methods_json(plan: "RewritePlan") -> list[dict[str, Any]]:
    methods = []
    for edit in plan.methods:
        method = plan.analysis.method(edit.plan_index)  # by index: labels are names, and names can repeat
        methods.append({
            "name": edit.name,
            "style": method.style,
            "moved": [{"value": p.value, "name": p.name, "device": p.device, "nbytes": p.nbytes,
                       "memory_id": p.memory_id, "offset": p.offset, "initial_data_index": p.initial_data_index,
                       "external_key": p.external_key, "copies_per_call_removed": p.copies_per_call,
                       "bytes_per_call_saved": p.bytes_per_call} for p in edit.placements],
            "buffers": edit.buffers,
            "instructions_removed": [{"chain": c, "instruction": k} for c, k in edit.removed],
            "instruction_map": [{"chain": c, "map": list(mapping)} for c, mapping in enumerate(edit.instruction_maps)
                                if any(new != old for old, new in enumerate(mapping))],
            "folded": [fold_json(f) for f in edit.folds],
            "released": list(edit.released),
            "not_moved": [{"value": v.value, "name": v.name, "nbytes": v.nbytes, "verdict": v.verdict,
                           "details": list(v.details)} for v in left_in_place(plan, method)],
            "h2d_bytes_per_call_before": method.h2d_bytes_per_call,
            "h2d_bytes_per_call_after": method.h2d_bytes_per_call - edit.bytes_per_call_saved,
        })
    return methods


def rewrite_json(result: "RewriteResult") -> dict[str, Any]:
    """The JSON document of one rewrite (the envelope's ``format_version`` and ``command`` excepted)."""
    plan = result.plan
    gain = result.fold_gain
    hint: Optional[dict[str, int]] = None if gain is None else {"tensors": gain.tensors,
                                                                 "bytes_per_call": gain.bytes_per_call}
    document: dict[str, Any] = to_jsonable({
        "input": result.input, "output": result.output, "dry_run": result.output is None and result.data is None,
        "changed": result.changed, "names": names_json(result.names),
        "verified": result.verified,
        "self_check_bytes_read": result.self_check_bytes,
        "written": result.written,
        "not_judged": [{"method": c.method, "value": c.value, "name": c.name, "nbytes": c.nbytes,
                        "device": None if c.pending_device is None else str(c.pending_device)}
                       for c in result.not_judged],
        "input_size": result.input_size, "output_size": result.output_size,
        "constants_moved": len(plan.placements), "values_folded": len(plan.folds),
        "bytes_per_call_saved": plan.bytes_per_call_saved,
        "fold": plan.options.fold, "duplicate_shared": plan.options.duplicate_shared,
        "device_bytes_added": plan.device_bytes_added,
        "device_memory": {"before": plan.memory.before, "after": plan.memory.after, "bound": plan.memory.bound,
                          "without_relayout": plan.memory.appended, "warning": plan.memory.warning(),
                          "kept_offsets": list(plan.memory.kept_offsets)},
        "initial_data_bytes_added": plan.initial_data_bytes,
        "constant_bytes_dropped": plan.dropped_bytes,
        "fold_cost": {kind: dict(zip(("values", "device_bytes", "file_bytes"), plan.fold_cost(duplicates)))
                      for kind, duplicates in (("folded", False), ("duplicated", True))},
        "instructions_removed": result.instructions_removed,
        "constant_entries_dropped": list(plan.dropped_constants),
        "initial_data_entries_added": len(plan.initial_data),
        "skipped": [{"method": s.verdict.method, "value": s.verdict.value, "name": s.verdict.name, "reason": s.reason}
                    for s in plan.skipped],
        "fold_skipped": [{"method": s.chain.method, "value": s.chain.result, "source": s.chain.source,
                          "kernels": [step.kernel for step in s.chain.steps], "reason": s.reason}
                         for s in plan.fold_skipped],
        "fold_hint": hint,
        "methods": _methods_json(plan),
        "runtime": {"target": plan.options.runtime.value, "encoding": plan.options.encoding.key,
                    "converted": plan.converted,
                    "output_needs": plan.output_need.to_json() if plan.output_need is not None else None,
                    **report_fields(plan.methods),
                    "constant_entries_added": len(plan.constant_entries),
                    "reencoded": [{"method": r.method, "value": r.value, "name": r.name, "device": str(r.device),
                                   "nbytes": r.nbytes, "host_constant": r.source} for r in plan.reencoded],
                    "kept_for_runtime": [{"method": s.verdict.method, "value": s.verdict.value,
                                          "name": s.verdict.name, "reason": s.reason} for s in plan.kept_for_runtime],
                    "unconverted": [{"method": u.method, "value": u.value, "name": u.name, "device": str(u.device),
                                     "nbytes": u.nbytes, "reason": u.reason} for u in plan.unconverted]},
    })
    return document
