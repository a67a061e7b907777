"""Process reward models: text → steps → tag positions → STEP pooling → rewards → metrics.

- ``steps``: ``format_steps``, ``step_rewards`` in three conventions (two_class, token_pair,
  value_head), ``first_error_from_rewards``.
- ``metrics``: ``processbench_f1``, ``step_auroc``.
- ``evaluation``: a PRM's metrics on labelled records, trivial baselines, bootstrap CIs.
- ``dataset``: the seeded step-labelled arithmetic dataset (train/test/dev/hard) and its loader.
- ``loading``: ``load_prm``, the shipped PRMs (fine-tuned and probe) or a local one;
- ``probe``: the probe PRM's head (``ProbeHead``) and its file;
- ``reward_model``: ``ProcessRewardModel`` and ``StepScores``.
- ``finetuned``, ``adapter``: the fine-tuned PRM (SmolLM2 + merged LoRA + score head).
- ``batched``: several prompts in one padded forward (``score_records``).
- ``memory``: what each convention's pooled output costs, from the simulator.
- ``curve``: the fine-tuned PRM's learning curve (dev metrics vs training problems).

Nothing here imports transformers until a model is loaded.
"""

from .curve import curve_frame, plot_learning_curve, read_curve
from .dataset import (
    ERROR_TYPES,
    HARD_ERROR_TYPES,
    generate_prm_dataset,
    generate_training_problems,
    load_prm_dataset,
    stratified_sample,
    write_prm_dataset,
)
from .evaluation import (
    baseline_rewards,
    choose_threshold,
    evaluate,
    first_errors,
    metrics_frame,
    paired_difference,
    read_report,
    up_to_first_error,
)
from .loading import DEFAULT_PRM, SHIPPED_PRMS, load_prm
from .memory import MEMORY_COLUMNS, prm_memory_table
from .metrics import ProcessBenchScores, processbench_f1, processbench_scores, step_auroc
from .probe import ProbeHead
from .reward_model import ProcessRewardModel, StepScores
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
    "DEFAULT_PRM",
    "ERROR_TYPES",
    "HARD_ERROR_TYPES",
    "MEMORY_COLUMNS",
    "SHIPPED_PRMS",
    "STEP_TAG_CANDIDATES",
    "FormattedSteps",
    "ProbeHead",
    "ProcessBenchScores",
    "ProcessRewardModel",
    "StepScores",
    "baseline_rewards",
    "choose_threshold",
    "curve_frame",
    "evaluate",
    "first_error_from_rewards",
    "first_errors",
    "format_steps",
    "generate_prm_dataset",
    "generate_training_problems",
    "load_prm",
    "load_prm_dataset",
    "metrics_frame",
    "paired_difference",
    "plot_learning_curve",
    "prm_memory_table",
    "processbench_f1",
    "processbench_scores",
    "read_curve",
    "read_report",
    "resolve_step_tag",
    "step_auroc",
    "step_logits",
    "step_rewards",
    "stratified_sample",
    "up_to_first_error",
    "write_prm_dataset",
]
