"""The answers a run sends: each finished request's response size and the API process's peak
host memory to build it (``SimResult.responses``), from vLLM's serialisation rule
(``vllm_rules.response.response_bytes``) on the shape the request delivers."""

from __future__ import annotations

import pandas as pd

from ..vllm_rules.classifier import head_output
from ..vllm_rules.response import response_bytes

#: ``SimResult.responses()`` columns.
RESPONSE_COLUMNS: dict[str, str] = {
    "request": "index in prompt_lens",
    "rows": "rows of its delivered output",
    "width": "values a row",
    "encoding_format": "vLLM's encoding_format",
    "body_bytes": "the answer's data: the values' JSON text, the base64 string or the raw bytes "
                  "(no response envelope)",
    "peak_host_bytes": "the API process's most bytes alive while building it, beyond the "
                       "output tensor (vllm_rules.response)",
    "relative_error": "stated error of an estimate (0.0: exact)",
}


def _task(task: str) -> str:
    """What the values are, for the JSON text: embeddings or probabilities."""
    return "token_embed" if "embed" in task else "token_classify"


def response_table(result, encoding_formats=("float", "base64", "bytes", "bytes_only"),
                   embed_dtype: str = "float32", endianness: str = "native", *,
                   endpoint: str = "pooling") -> pd.DataFrame:
    """One row per finished request and encoding format (``RESPONSE_COLUMNS``)."""
    if isinstance(encoding_formats, str):
        encoding_formats = (encoding_formats,)
    cfg = result.config
    params = result.pooling_params or [None] * len(result.prompt_lens)
    width = cfg.pooling_kind.output_width(cfg)
    rows_out = []
    for rec in result.requests.itertuples():
        if rec.finish_step < 0 or rec.delivered_rows <= 0:
            continue  # aborted (or a closed form's single row without a step table)
        cols = head_output(cfg, 1, width, params[rec.request])[1]
        for fmt in encoding_formats:
            r = response_bytes((int(rec.delivered_rows), int(cols)), fmt, embed_dtype,
                               endianness, endpoint=endpoint, task=_task(cfg.task))
            rows_out.append({"request": rec.request, "rows": int(rec.delivered_rows),
                             "width": int(cols), "encoding_format": fmt,
                             "body_bytes": r.body_bytes, "peak_host_bytes": r.peak_host_bytes,
                             "relative_error": r.relative_error})
    return pd.DataFrame(rows_out, columns=list(RESPONSE_COLUMNS))


#: ``response_sweep`` columns.
RESPONSE_SWEEP_COLUMNS: tuple[str, ...] = ("prompt_len", "encoding_format", "embed_dtype",
                                           "body_bytes", "peak_host_bytes", "relative_error")


def response_sweep(prompt_lens, width: int,
                   encoding_formats=("float", "base64", "bytes", "bytes_only"),
                   embed_dtype: str = "float32", endianness: str = "native", *,
                   endpoint: str = "pooling", task: str = "token_embed") -> pd.DataFrame:
    """Per prompt length and encoding format, the answer of one ``[prompt_len, width]`` output
    and the API process's peak to build it (``tp.response_bytes``), for plotting against the
    device's pooling peak (``tp.viz.plot_response_memory``).

    Example:
        >>> df = response_sweep([1024, 32_768], 4096, ["bytes"])
        >>> df["peak_host_bytes"].tolist()
        [16777216, 536870912]
    """
    if isinstance(encoding_formats, str):
        encoding_formats = (encoding_formats,)
    rows = []
    for n in prompt_lens:
        for fmt in encoding_formats:
            r = response_bytes((int(n), width), fmt, embed_dtype, endianness,
                               endpoint=endpoint, task=task)
            rows.append({"prompt_len": int(n), "encoding_format": fmt,
                         "embed_dtype": embed_dtype, "body_bytes": r.body_bytes,
                         "peak_host_bytes": r.peak_host_bytes,
                         "relative_error": r.relative_error})
    return pd.DataFrame(rows, columns=list(RESPONSE_SWEEP_COLUMNS))
