"""The schedule: which tokens of which requests each step computes.

The backends take a schedule (a list of ``ScheduledStep``) as their input — the schedule seam.
``scheduler.schedule`` is tokpool's own vLLM-shaped scheduler (no vLLM needed);
``tokpool.sim.vllm_run`` drives the installed vLLM's own ``Scheduler`` to produce one.
"""
