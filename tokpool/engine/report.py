"""The engine check's report: the comparison table and its summary as text, the per-step memory
table, and whether the check passed (what ``tokpool engine-check`` prints and exits with).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .compare import MEMORY_COLUMNS


def format_report(table: pd.DataFrame, summary: dict[str, Any]) -> str:
    """The comparison table and its summary as text (what ``tokpool engine-check`` prints)."""
    shown = table.assign(
        text=table["text"].str.replace("\n", " ").str.slice(0, 32),
        max_abs_diff=table["max_abs_diff"].map(lambda d: f"{d:.2e}"),
    )
    lines = [
        f"vLLM {summary.get('vllm_version')} on {summary.get('device')} vs tokpool: "
        f"{summary['model']}, {summary['task']}, "
        + (f"tolerance {summary['tolerance']:g}" if summary["tolerance"] is not None else
           f"dtype {summary.get('dtype')}: outputs compared by shape"),
        shown.to_string(index=False),
    ]
    for run in summary["runs"]:
        diff = run["first_schedule_difference"]
        lines.append(
            f"chunk size {run['chunk_size'] or 'none'}: engine start {run['start_seconds']:.1f} s "
            f"(peak RSS {run['peak_rss_mb']} MB), "
            f"{run['engine_steps']} engine steps vs {run['simulated_steps']} simulated; schedule "
            + ("equal" if diff is None else f"differs at {diff}"))
        if "memory" in run:
            lines.append(format_memory(run["memory"]))
    lines.append(f"{len(table)} prompt runs, {int(table['tokens'].sum())} tokens: "
                 + ("all outputs within tolerance, schedules equal"
                    if _outputs_and_schedules_agree(table, summary) else
                    f"{int((~table['within_tol']).sum())} outputs over tolerance, "
                    f"{sum(r['first_schedule_difference'] is not None for r in summary['runs'])}"
                    " schedules differ"))
    if any("memory" in run for run in summary["runs"]):
        compared = sum(len(run["memory"]) for run in summary["runs"])
        equal = sum(int(run["memory"]["equal"].sum()) for run in summary["runs"])
        lines.append(f"memory: {compared} steps compared, {equal} equal (cache, stranded, "
                     "pool, in-step peak, bytes written, host copy, output rows)")
    return "\n".join(lines)


def format_memory(comparison: pd.DataFrame) -> str:
    """A ``memory_comparison`` table as text: one line per step, engine / tokpool bytes."""
    def pair(row, key: str) -> str:
        got, want = row[f"{key}_engine"], row[f"{key}_tokpool"]
        if key == "outputs":
            got = "-" if got is None else ",".join(f"{r}:{n}" for r, n in sorted(got.items()))
            want = "-" if want is None else ",".join(f"{r}:{n}" for r, n in sorted(want.items()))
            return got or "-" if got == want else f"{got or '-'} / {want or '-'}"
        if got == want:
            return f"{got:,}"
        return f"{'-' if got is None else f'{got:,}'} / {'-' if want is None else f'{want:,}'}"

    keys = (*MEMORY_COLUMNS, "outputs")
    table = pd.DataFrame([{
        "step": int(row["step"]), "tokens": int(row["tokens"]),
        **{key: pair(row, key) for key in keys},
        "act_temp": "-" if row["act_temp_engine"] is None else f"{row['act_temp_engine']:,}",
        "equal": "yes" if row["equal"] else "NO",
    } for _, row in comparison.iterrows()])
    return ("per-step pooling bytes, engine / tokpool where they differ (act_temp: the "
            "activation's own temporaries, measured, not in the ledger):\n"
            + table.to_string(index=False))


def _outputs_and_schedules_agree(table: pd.DataFrame, summary: dict[str, Any]) -> bool:
    return bool(table["within_tol"].all()) and all(
        r["first_schedule_difference"] is None for r in summary["runs"])


def check_passed(table: pd.DataFrame, summary: dict[str, Any]) -> bool:
    """Outputs within tolerance, schedules equal and, where memory was compared, every step
    equal."""
    return _outputs_and_schedules_agree(table, summary) and all(
        bool(run["memory"]["equal"].all()) for run in summary["runs"] if "memory" in run)
