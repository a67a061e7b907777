"""Real models offline: a model zoo, chunked prefill with a KV cache, model-backed sources.

Importing this package does not import transformers; loading a model does.
"""

from .compare import compare_chunked, summarize_chunked
from .encode_loop import CorruptedOutputWarning, StepTimes
from .gguf_cache import prune_stale_entries
from .integrity import verify_entry
from .loading import DamagedModelError, ModelNotFoundError, load_model
from .pooling_model import PoolingModel
from .prompts import Prompt
from .registry import BUILTIN_MODELS, list_models, model_cache_dir
from .source import ModelSource

__all__ = [
    "BUILTIN_MODELS",
    "CorruptedOutputWarning",
    "DamagedModelError",
    "ModelNotFoundError",
    "ModelSource",
    "PoolingModel",
    "Prompt",
    "StepTimes",
    "compare_chunked",
    "list_models",
    "load_model",
    "model_cache_dir",
    "prune_stale_entries",
    "summarize_chunked",
    "verify_entry",
]
