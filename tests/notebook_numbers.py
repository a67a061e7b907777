"""Every number a notebook states, and the expression that computes it in the same run.

Shared by ``test_notebooks.py`` (which executes each notebook once, in quick mode) and
``test_notebook_numbers.py``: ``run_notebook`` executes a notebook with one extra cell at the end
that evaluates this table's expressions in the notebook's own namespace, so each stated number
is checked against the value computed in that very run, and removes the cell again.

A *stated number* is a number in a markdown cell (outside code spans and link targets) or in the
literal text of a ``print``/``display`` call or an f-string. Each must be covered by a claim:
``CLAIMS[notebook]`` maps a phrase, as written (whitespace collapsed), to an expression whose
value(s) the phrase's numbers must equal at the precision written (``0.456`` to 3 decimals,
``23 GiB`` to the unit). Numbers that are not quantities are exempt by rule (``EXEMPT``: names
such as Qwen3-Embedding-8B or H100, versions, PR numbers, notebook and section numbers);
``QUOTED`` lists the few numbers quoted from elsewhere, each with its source.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
CELL_TIMEOUT = int(os.environ.get("TOKPOOL_NOTEBOOK_TIMEOUT", "600"))

#: A number as prose writes it: 9,216 · 0.456 · −1 (not part of a name: 8B, H100, float32, v2).
NUMBER = re.compile(r"(?<![\w.#/\\§-])−?\d[\d,]*(?:\.\d+)?(?![\w§])")
#: Spans whose digits are not quantities (masked before numbers are looked for).
EXEMPT = (
    re.compile(r"`[^`\n]*`"),                      # code spans: code, not prose
    re.compile(r"\]\([^)\s]*\)"),                  # link targets
    re.compile(r"\d+\.\d+\.\d+"),                  # versions: vLLM 0.33.0
    re.compile(r"(?<![\d.])\b0\d\b(?!\.\d)"),          # notebook numbers: 01 ... 05
    re.compile(r"^#{1,6} +\d+\.", re.MULTILINE),   # section numbers: "## 4. Several ..."
    re.compile(r"^ *\d+\. ", re.MULTILINE),        # numbered list markers
    re.compile(r"(?<=[A-Za-z])[+−-]\d+\b"),          # arithmetic on a symbol: step N+1
)

#: Per notebook: code run after the last cell, before the claims (helpers the claims use).
SETUP: dict[str, str] = {
    "02_chunked_prefill_ownership": """
def _ranges(result, request=0):  # (first, last) token of each of the request's chunks
    return tuple(x for step in result.schedule for r, a, b in step.chunks if r == request
                 for x in (a, b - 1))
_B = config.max_num_batched_tokens
_L = _ranges(legacy)[-1] - _ranges(legacy)[-2] + 1  # tokens in the last chunk
_lucky = table.loc[table["ok"] & (table["position"] < _ranges(legacy)[-2]), "position"]
_sync, _async = set(runs["legacy", "sync"].corrupted), set(runs["legacy", "async"].corrupted)
_o0, _o1 = reuse.overwrites.iloc[0], reuse.overwrites.iloc[1]  # the two overwrites drawn
_fits_in = next(s.index for s in runs["clone", "sync"].schedule
                if (0, 0, workload[0]) in s.chunks)
def _ranges_n(result, request):  # the request's chunk sizes, in order
    return tuple(b - a for step in result.schedule for r, a, b in step.chunks if r == request)
import tokpool.widgets.view as _view
""",
    "03_token_embeddings": """
import inspect as _inspect
_sim = _inspect.signature(tp.plot_similarity).parameters
""",
    "04_prm_step_rewards": """
import torch
from tokpool.prm.loading import _WIDTHS as _W
def _index(convention, width, **kw):  # which column's high logit makes the reward high
    for i in range(width):
        row = torch.zeros(1, width)
        row[0, i] = 9.0
        if float(tp.prm.step_rewards(row, [5], step_tag_id=5, convention=convention,
                                     **kw)[0]) > 0.5:
            return i
_T, _H = report["test"]["smollm2-prm"], report["hard"]["smollm2-prm"]
_B = report["before"]
_P = tp.MODEL_PRESETS
_splits = len(tp.load_prm_dataset("test")) + len(tp.load_prm_dataset("hard"))
_ci = int(next(k for k in _T if k.startswith("ci"))[2:])  # the report's CI level: ci95
""",
    "05_memory_vs_prompt_length": """
import numpy as _np
import torch
import tokpool.widgets.view as _view
_q8 = tp.MODEL_PRESETS["Qwen3-Embedding-8B"]
_f32 = torch.finfo(torch.float32).bits // 8
_g = df[(df["policy"] == "prealloc") & df["async_scheduling"]
        & (df["prompt_len"] > 2 * embedding.max_num_batched_tokens)]
_slope = _np.polyfit(_np.log(_g["prompt_len"]), _np.log(_g["peak_pooling_bytes"]), 1)[0]
_chunk = embedding.max_num_batched_tokens * embedding.hidden_size * embedding.dtype_size
def _shepherd(async_scheduling):  # math-shepherd's clone peak at the longest prompt
    g = per_model[per_model["model"].str.startswith("math-shepherd")
                  & (per_model["async_scheduling"] == async_scheduling)]
    return float(g.loc[g["prompt_len"] == lens[-1], "peak_pooling_bytes"].iloc[0])
_g8 = per_model[per_model["model"].str.startswith("Qwen3-Embedding-8B")
                & ~per_model["async_scheduling"]]
_q8_at_longest = float(_g8.loc[_g8["prompt_len"] == lens[-1], "peak_pooling_bytes"].iloc[0])
assert abs(_q8_at_longest / _shepherd(True) - 5) < 0.01, "a fifth"  # the prose says a fifth
from tokpool.late_interaction.listwise import listwise_prompts as _lp
_listwise_llm = tp.simulate(_lp([135], [190] * n_docs, template_tokens=12850 - n_docs * 191 - 136),
                            jina.replace(usage="llm"), mode="analytic")  # the offline LLM class
assert len(_listwise_llm.steps) == 1, "one step"  # the prose says one step
""",
}

SETUP["06_late_interaction"] = """
import inspect as _inspect
_factors = [int(m.split()[-1]) for m in shipped.index if m.startswith("MaxSim, pool")]
_mrr_k = int(next(c for c in shipped.columns if c.startswith("mrr@")).split("@")[1].split("_")[0])
_level = round(_inspect.signature(li.bootstrap_ci).parameters["level"].default * 100)
"""

#: Per notebook: phrase as written → expression (one value per number in the phrase).
CLAIMS: dict[str, dict[str, str]] = {
    "01_task_gate": {},
    "02_chunked_prefill_ownership": {
        "A 20-token prompt with 8 tokens per step":
            "(one.prompt_lens[0], config.max_num_batched_tokens)",
        "tokens 0–7, 8–15, then 16–19": "_ranges(one)",
        "each unfinished step clones 8 rows × 576 columns × 2 bytes = 9,216 bytes":
            "(_B, config.width, config.dtype_size, int(one.steps['pool_bytes'].iloc[0]))",
        "while the 16 cached rows are still alive": "_ranges(one)[-2]",
        "T = 20 tokens, L = 4 in the last chunk":
            "(one.prompt_lens[0], _ranges(one)[-1] - _ranges(one)[-2] + 1)",
        "Steps are numbered from 0": "int(one.steps['step'].min())",
        "Step 1 writes tokens 8–15 over rows 0–7, all the rows the view of tokens 0–7 points at":
            "(int(_o0.step), *_ranges(reuse)[2:4], int(_o0.buffer_row_start), "
            "int(_o0.buffer_row_end) - 1, int(_o0.token_start), int(_o0.token_end) - 1)",
        "Step 2 writes only 4 rows (0–3): the view of tokens 8–15 loses tokens 8–11 and keeps "
        "12–15, by luck":
            "(int(_o1.step), int(_o1.rows_written), int(_o1.buffer_row_start), "
            "int(_o1.buffer_row_end) - 1, *_ranges(reuse)[2:4], int(_o1.token_start), "
            "int(_o1.token_end) - 1, int(_o1.token_end), _ranges(reuse)[3])",
        "A clone made in step 0 or 1":
            "tuple(int(s) for s in reuse.chunks.loc[reuse.chunks['overwritten_rows'] > 0, "
            "'step'])",
        "positions 0–11 hold tokens of later chunks": "(int(wrong.min()), int(wrong.max()))",
        "Positions 12–15 are right only by luck": "(int(_lucky.min()), int(_lucky.max()))",
        "the last step wrote just 4 rows (0–3)": "(_L, 0, _L - 1)",
        "so rows 4–7 still held tokens 12–15":
            "(_L, _B - 1, int(_lucky.min()), int(_lucky.max()))",
        "Only the last chunk's own rows, 16–19,": "_ranges(legacy)[-2:]",
        "5 tokens (fits in step 0), 12 tokens (three chunks), 3 tokens":
            "(workload[0], _fits_in, workload[1], workload[2])",
        "Legacy corrupts the chunked request 1 in both modes": "tuple(sorted(_sync & _async))",
        "the one-shot request 0 under async": "tuple(sorted(_async - _sync))",
        "its view of rows 0–4 is read by the host copy during step 1":
            "(0, workload[0] - 1, _fits_in + 1)",
        "which has just written request 1's next chunk there": "tuple(sorted(_sync))",
        "Request 2 is also a one-shot view under async, yet it survives":
            "2 if 2 not in _async else None",
        "(200 dpi;": "_view.PNG_DPI",
        "The client of request 1 (12 tokens: chunks of 3, 8 and 1 at this budget) disconnects "
        "before step 1":
            "(1, workload[1], *_ranges_n(runs['clone', 'sync'], 1), "
            "int(hung_up.aborts['step'][0]))",
        "its first chunk's clone (3 rows × 576 × 2 bytes = 3,456 bytes) is freed in step 1, "
        "which now runs request 2 alone":
            "(int(hung_up.aborts['freed_pool_bytes'][0]) // (config.width * config.dtype_size), "
            "config.width, config.dtype_size, int(hung_up.aborts['freed_pool_bytes'][0]), "
            "int(hung_up.aborts['step'][0]), *[r for r, _, _ in hung_up.schedule[1].chunks])",
    },
    "03_token_embeddings": {
        "(30 layers, hidden size 576)": "(smollm.num_layers, emb.shape[1])",
        "(6 layers, hidden size 384)": "(minilm.num_layers, emb_enc.shape[1])",
        "(576 columns for SmolLM2)": "emb.shape[1]",
        "the scale is fixed at −1…1": "(_sim['vmin'].default, _sim['vmax'].default)",
        "(31 for SmolLM2: the embeddings and 30 layers)":
            "(smollm.num_layers + 1, smollm.num_layers)",
    },
    "04_prm_step_rewards": {
        "| 2 logits | softmax, index 1": "(_W['two_class'], _index('two_class', 2))",
        "softmax over the pair, index 0": "_index('token_pair', 2, returned_token_ids=[0, 1])",
        "| 1 scalar |": "_W['value_head']",
        "cut to its first 17 layers, with LoRA weights merged into layers 13–16 and a 2-label "
        "score head, trained on 3,200":
            "(prm.model.num_layers, report['prm']['first_layer'], prm.model.num_layers - 1, "
            "report['prm']['num_labels'], report['prm']['train_examples'])",
        "(600 examples)": "_splits",
        "rescore 600 examples here": "_splits",
        "for the first 24 test problems": "len(sample['ids'])",
        "(400 examples, the training distribution)": "len(test)",
        "(200 examples whose errors": "len(tp.load_prm_dataset('hard'))",
        "its bootstrap 95 % interval": "_ci",
        "the first 800 are": "len(tp.load_prm_dataset('train'))",
        "the bars are bootstrap 95 % intervals": "_ci",
        "(800 problems)": "_B['prm']['train_examples']",
        "trained on 3,200 problems (the first version on 800)":
            "(report['prm']['train_examples'], _B['prm']['train_examples'])",
        "its ProcessBench F1 is 0.456 [0.395, 0.512] (first version 0.422, probe 0.407)":
            "(_T['processbench_f1'], *_T['ci95']['processbench_f1'], "
            "_B['test']['processbench_f1'], report['test']['probe']['processbench_f1'])",
        "(step AUROC up to the first error 0.763 vs 0.720, paired CI [0.013, 0.075])":
            "(_T['step_auroc_up_to_first_error'], "
            "report['test']['probe']['step_auroc_up_to_first_error'], "
            "*report['test']['smollm2-prm_minus_probe']['step_auroc_up_to_first_error']"
            "['ci95'])",
        "its F1 is 0.287 [0.193, 0.379], no better than the first version's 0.297":
            "(_H['processbench_f1'], *_H['ci95']['processbench_f1'], "
            "_B['hard']['processbench_f1'])",
        "pooling sees only 2 logits per token": "report['prm']['num_labels']",
        "(576 wide here)": "_P['SmolLM2-135M'].hidden_size",
        "(SmolLM2-135M, vocabulary 49,152, context 8,192)":
            "(_P['SmolLM2-135M'].vocab_size, _P['SmolLM2-135M'].max_model_len)",
        "Qwen2.5-Math-PRM-7B (context 4,096)": "_P['Qwen2.5-Math-PRM-7B'].max_model_len",
        "F1 0.": "report['test']['always_correct']['processbench_f1']",
    },
    "05_memory_vs_prompt_length": {
        "a hidden size of 4096 in bfloat16 that is 8 GiB":
            "(embedding.hidden_size, (1 << 20) * embedding.hidden_size * embedding.dtype_size "
            "/ 2**30)",
        "0 on the device (T·W·s on the host, allocated at the first chunk)":
            "int(df.loc[df['policy'] == 'offload', 'peak_pooling_bytes'].max())",
        "its float32 cast takes T·W·4 and the activation's float32 output another T·W·4":
            "(_f32, _f32)",
        "`clone` at 32,768 tokens holds 1.25 GiB":
            "(run_32k.prompt_lens[0], first_table.loc[32_768, 'clone'] / 2**30)",
        "pooling's bfloat16 output (T·W·2) is alive with the float32 cast (T·W·4) and the "
        "activation's float32 output (T·W·4)":
            "(peak_32k['pooled output'] // (32_768 * vllm_default.width), "
            "peak_32k['float32 cast'] // (32_768 * vllm_default.width), "
            "peak_32k['activation'] // (32_768 * vllm_default.width))",
        "Steps of 8,192 tokens run eagerly": "embedding.max_num_batched_tokens",
        "vLLM's head adds T·W·4 bytes for the cast and another T·W·4": "(_f32, _f32)",
        "only the selected columns are owned: 20 MiB at a million tokens":
            "_shepherd(False) / 2**20",
        "clone the whole hidden rows first: 8 GiB, the bfloat16 rows of a 4,096-wide model":
            "(_shepherd(True) / 2**30, tp.MODEL_PRESETS['math-shepherd-mistral-7b-prm']"
            ".hidden_size)",
        "a fifth of the 40 GiB Qwen3-Embedding-8B holds":
            "_q8_at_longest / 2**30",
        "Qwen3-Embedding-8B (hidden size 4096)": "embedding.hidden_size",
        "on an H100 (80 GiB)": "hbm / 2**30",
        "chunks of 8,192 tokens": "embedding.max_num_batched_tokens",
        "would use 16,384": "vllm_default.replace(usage='llm').max_num_batched_tokens",
        "The model's context is 40,960 tokens": "_q8.max_model_len",
        "weights (about 14 GiB in bfloat16)": "_q8.num_parameters * 2 / 2**30",
        "every policy is a straight line of slope 1": "_slope",
        "with 8,192-token eager steps": "embedding.max_num_batched_tokens",
        "Below one chunk (8,192 tokens)": "embedding.max_num_batched_tokens",
        "hidden sizes 576, 1024 and 4096":
            "tuple(sorted(p.hidden_size for p in tp.MODEL_PRESETS.values() "
            "if p.default_task == 'token_embed'))",
        "pooling sees 2 fresh float32 logits per token":
            "tp.MODEL_PRESETS['Qwen2.5-Math-PRM-7B'].num_labels",
        "backbone's **4,096-wide hidden rows**":
            "tp.MODEL_PRESETS['math-shepherd-mistral-7b-prm'].hidden_size",
        "(8,192 × 4096 × 2 bytes = 64 MiB)":
            "(embedding.max_num_batched_tokens, embedding.hidden_size, embedding.dtype_size, "
            "_chunk / 2**20)",
        "(92 % of the GPU": "mine.gpu_memory_utilization * 100",
        "(200 dpi)": "_view.PNG_DPI",
        "reads 64 documents in one 12,850-token prompt": "(n_docs, listwise.prompt_lens[0])",
        "prompt chunked at 8,192 tokens) pooling holds 41.1 MiB at its peak but delivers only the "
        "65 marker rows × 512 in bfloat16, 66,560 B":
            "(jina.max_num_batched_tokens, listwise.peak_pooling_bytes / 2**20, "
            "int(listwise.requests['delivered_rows'][0]), "
            "jina.output_width, int(listwise.requests['output_bytes'][0]))",
        "runs it in one step and holds 260 KiB": "_listwise_llm.peak_pooling_bytes / 2**10",
        "32,768-token document late-chunked at 512 on Qwen3-Embedding-8B":
            "(late.prompt_lens[0], chunk)",
        "holds 448 MiB, every token's row until the last chunk, while the user gets 64 rows, "
        "1 MiB": "(late.peak_pooling_bytes / 2**20, int(late.requests['delivered_rows'][0]), "
                 "int(late.requests['output_bytes'][0]) / 2**20)",
    },
    "06_late_interaction": {
        "against 100 documents of 512 tokens":
            "(len(two.requests) - 1, int(two.requests['prompt_len'].iloc[-1]))",
        "keeps what reaches the host at 4 bytes a request": "two.host_bytes / len(two.requests)",
        "projected to 512 and delivered in the model dtype. Its prompt for 64 documents":
            "(listwise.head.dim, int(listwise.requests.iloc[0]['delivered_rows']) - 1)",
        "int64 ids, 4 bits by default": "li.DEFAULT_NBITS['fast-plaid']",
        "at factors 2, 3 and 4 — MRR@10 and recall@k with bootstrap 95 % intervals":
            "(*_factors, _mrr_k, _level)",
        "MRR@10": "_mrr_k",
    },
}

#: Per notebook: numbers quoted from a source the notebook cannot run, with that source.
QUOTED: dict[str, dict[str, str]] = {
    "03_token_embeddings": {
        "accepts a cosine similarity of 0.99":
            "vLLM's chunked-prefill pooling test (tests/models/language/pooling), not shipped "
            "in the vLLM wheel",
    },
}

_MARK = "__TOKPOOL_CLAIMS__"


def _mask(text: str) -> str:
    """``text`` with the digits of exempt spans replaced by ``§`` (same length)."""
    masked = text
    for pattern in EXEMPT:
        masked = pattern.sub(lambda m: re.sub(r"\d", "§", m.group()), masked)
    return masked


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _literal_texts(source: str) -> list[str]:
    """The literal text a code cell shows: ``print``/``display`` arguments and f-strings."""
    try:
        tree = ast.parse(source.replace("%config", "#%config"))
    except SyntaxError:
        return []
    texts: list[str] = []
    shown: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("print", "display"):
            for arg in node.args:
                for sub in ast.walk(arg):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        shown.add(id(sub))
        if isinstance(node, ast.JoinedStr):
            for part in node.values:
                if isinstance(part, ast.Constant):
                    shown.add(id(part))
    skip = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.FormattedValue)
            and node.format_spec is not None for sub in ast.walk(node.format_spec)}
    for node in ast.walk(tree):
        if id(node) in shown and id(node) not in skip:
            texts.append(node.value)
    return texts


def stated_texts(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``(where, text)`` for every markdown cell and every shown literal of a code cell."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            out.append((f"markdown cell {i}", cell.source))
        elif cell.cell_type == "code":
            out += [(f"code cell {i} (shown text)", t) for t in _literal_texts(cell.source)]
    return out


@dataclass
class Stated:
    where: str
    number: str
    context: str


def stated_numbers(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, number)`` of each stated number in ``text`` (collapsed)."""
    masked = _collapse(_mask(text))
    found = ((m.start(), m.group().rstrip(",")) for m in NUMBER.finditer(masked))
    return [(start, start + len(number), number) for start, number in found]


def value_of(number: str) -> tuple[float, int]:
    """The value of a stated number and its decimals: ``"9,216"`` → ``(9216.0, 0)``."""
    plain = number.replace(",", "").replace("−", "-")
    decimals = len(plain.split(".", 1)[1]) if "." in plain else 0
    return float(plain), decimals


def agrees(stated: str, computed: float) -> bool:
    """``computed`` written at ``stated``'s precision is ``stated``."""
    value, decimals = value_of(stated)
    return abs(computed - value) <= 0.5 * 10 ** -decimals + 1e-9


def check(name: str, nb: nbformat.NotebookNode, values: dict[str, list[float] | str]
          ) -> tuple[list[str], list[str], int]:
    """(uncovered numbers, wrong claims, numbers checked) for an executed notebook."""
    claims, quoted = CLAIMS.get(name, {}), QUOTED.get(name, {})
    uncovered: list[str] = []
    wrong: list[str] = []
    found: set[str] = set()
    checked = 0
    for where, text in stated_texts(nb):
        plain = _collapse(text)
        numbers = stated_numbers(text)
        covered = [False] * len(numbers)
        for phrase in [*claims, *quoted]:
            start = plain.find(phrase)
            while start >= 0:
                found.add(phrase)
                end = start + len(phrase)
                inside = [k for k, (a, b, _) in enumerate(numbers) if a >= start and b <= end]
                for k in inside:
                    covered[k] = True
                if phrase in claims:
                    got = values.get(phrase)
                    said = [numbers[k][2] for k in inside]
                    if isinstance(got, str) or got is None:
                        wrong.append(f"{where}: {phrase!r}: {claims[phrase]} failed: {got}")
                    elif len(got) != len(said) or not all(
                            agrees(s, v) for s, v in zip(said, got, strict=False)):
                        wrong.append(f"{where}: {phrase!r} states {said}, the run computed "
                                     f"{[round(v, 6) for v in got]} ({claims[phrase]})")
                    else:
                        checked += len(said)
                start = plain.find(phrase, start + 1)
        for (a, b, number), ok in zip(numbers, covered, strict=True):
            if not ok:
                uncovered.append(f"{where}: {number!r} in …{plain[max(0, a - 50):b + 30]}…")
    stale = [f"claim {p!r} is stated nowhere in the notebook" for p in [*claims, *quoted]
             if p not in found]
    return uncovered, wrong + stale, checked


def _claims_cell(name: str) -> str:
    expressions = CLAIMS.get(name, {})
    return (SETUP.get(name, "") + f"""
import json as _json
def _numbers(v):
    v = v if isinstance(v, (tuple, list)) else (v,)
    return [float(x) if x is not None else float("nan") for x in v]
_values = {{}}
for _phrase, _expr in {expressions!r}.items():
    try:
        _values[_phrase] = _numbers(eval(_expr))
    except Exception as _err:
        _values[_phrase] = f"{{type(_err).__name__}}: {{_err}}"
print({_MARK!r} + _json.dumps(_values))
""")


@functools.cache
def _execute(path: Path) -> tuple[nbformat.NotebookNode, dict]:
    from nbconvert.preprocessors import ExecutePreprocessor

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(_claims_cell(path.stem)))
    saved = {k: os.environ.get(k) for k in ("TOKPOOL_QUICK", "MPLBACKEND")}
    os.environ["TOKPOOL_QUICK"] = "1"
    # the kernel picks its inline backend: a test-wide MPLBACKEND=Agg would hide the figures
    os.environ.pop("MPLBACKEND", None)
    start = time.perf_counter()
    try:
        ExecutePreprocessor(timeout=CELL_TIMEOUT, kernel_name="python3").preprocess(
            nb, {"metadata": {"path": str(NOTEBOOK_DIR)}})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    last = nb.cells.pop()
    text = "".join(o.get("text", "") for o in last.get("outputs", [])
                   if o["output_type"] == "stream")
    errors = [o for o in last.get("outputs", []) if o["output_type"] == "error"]
    if errors or _MARK not in text:
        raise AssertionError(f"{path.name}: the claims cell failed: "
                             f"{errors[0]['evalue'] if errors else text[-2000:]}")
    values = json.loads(text.split(_MARK, 1)[1])
    keep = os.environ.get("TOKPOOL_NOTEBOOK_OUT")  # keep executed copies (and run-all times)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, Path(keep) / path.name)
        with open(Path(keep) / "run_all_seconds.txt", "a", encoding="utf-8") as f:
            f.write(f"{path.name}\t{time.perf_counter() - start:.1f}\n")
    return nb, values


def run_notebook(path: Path) -> tuple[nbformat.NotebookNode, dict]:
    """Execute ``path`` once per test session as ``jupyter nbconvert --execute`` does (quick
    mode), with the claims evaluated at the end; a copy of the notebook and the values."""
    nb, values = _execute(Path(path).resolve())
    return copy.deepcopy(nb), values
