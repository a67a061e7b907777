"""vLLM's and torch's import-time log lines stay out of a cell, tokpool's own messages do not
(``tokpool.pooler.vllm_bridge.quiet_vllm_import``). torch 2.14.1's lines are replayed as recorded:
that
torch is a multi-GB CUDA download here, so its loggers are driven with the recorded lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import pytest

from tokpool.pooler.vllm_bridge import quiet_vllm_import

#: (logger, message) as torch 2.14.1 and vLLM log them while vLLM is imported.
RECORDED = (
    ("torch._opaque_base", "torch._opaque_base is deprecated"),
    ("torch.utils.cpp_extension", "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'"),
    ("vllm.platforms", "Automatically detected platform cpu."),
)


def test_recorded_import_lines_are_kept_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with quiet_vllm_import():
        for name, message in RECORDED:
            logging.getLogger(name).warning(message)
            logging.getLogger(name).info(message)
        logging.getLogger("tokpool.sim").warning("tokpool's own message")
    shown = [r.getMessage() for r in caplog.records]
    assert shown == ["tokpool's own message"]
    logging.getLogger("torch.utils.cpp_extension").warning("after the import")  # shown again
    assert caplog.records[-1].getMessage() == "after the import"


def test_errors_and_other_warnings_still_show(caplog: pytest.LogCaptureFixture) -> None:
    with quiet_vllm_import():
        logging.getLogger("vllm").error("vLLM cannot start")
    assert [r.getMessage() for r in caplog.records] == ["vLLM cannot start"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_vllm_import():
            warnings.warn_explicit("from vllm", FutureWarning, "vllm/x.py", 1, module="vllm.x")
            warnings.warn_explicit("from torch", UserWarning, "torch/x.py", 1, module="torch")
            warnings.warn("tokpool's own warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["tokpool's own warning"]


def test_a_logger_with_its_own_level_is_raised_and_put_back() -> None:
    child = logging.getLogger("torch._tokpool_test_child")
    child.setLevel(logging.INFO)
    with quiet_vllm_import():
        assert child.level == logging.ERROR
        assert logging.getLogger("torch").level == logging.ERROR
    assert child.level == logging.INFO


@pytest.mark.parity
def test_simulating_on_vllms_scheduler_prints_nothing() -> None:
    """A fresh interpreter, as a kernel: vLLM imported by ``scheduler="vllm"``, no log line."""
    from tokpool.pooler.vllm_bridge import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed here (make vllm)")
    code = ("import tokpool as tp\n"
            "cfg = tp.SimConfig(hidden_size=16, max_num_batched_tokens=8)\n"
            "r = tp.simulate([5, 12, 3], cfg, scheduler='vllm')\n"
            "print('steps', len(r.schedule))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=True)
    assert done.stdout.strip().startswith("steps ") and done.stderr == ""
