"""Process reward models: text → steps → tag positions → STEP pooling → rewards → metrics.

- ``steps``: ``format_steps``, ``step_rewards`` in three conventions (two_class, token_pair,
  value_head), ``first_error_from_rewards``.
- ``metrics``: ``processbench_f1``, ``step_auroc``.
- ``dataset``: the seeded step-labelled arithmetic dataset and its loader.
- ``probe``: the probe PRM on SmolLM2 and ``load_prm``.
- ``memory``: what each convention's pooled output costs, from the simulator.

Nothing here imports transformers until a model is loaded.
"""

from .dataset import (
    ERROR_TYPES,
    generate_prm_dataset,
    load_prm_dataset,
    write_prm_dataset,
)
from .memory import MEMORY_COLUMNS, prm_memory_table
from .metrics import ProcessBenchScores, processbench_f1, processbench_scores, step_auroc
from .probe import ProbeHead, ProcessRewardModel, StepScores, load_prm
from .steps import (
    CONVENTIONS,
    STEP_TAG_CANDIDATES,
    FormattedSteps,
    first_error_from_rewards,
    format_steps,
    resolve_step_tag,
    step_logits,
    step_rewards,
)

__all__ = [
    "CONVENTIONS",
    "ERROR_TYPES",
    "MEMORY_COLUMNS",
    "STEP_TAG_CANDIDATES",
    "FormattedSteps",
    "ProbeHead",
    "ProcessBenchScores",
    "ProcessRewardModel",
    "StepScores",
    "first_error_from_rewards",
    "format_steps",
    "generate_prm_dataset",
    "load_prm",
    "load_prm_dataset",
    "prm_memory_table",
    "processbench_f1",
    "processbench_scores",
    "resolve_step_tag",
    "step_auroc",
    "step_logits",
    "step_rewards",
    "write_prm_dataset",
]
