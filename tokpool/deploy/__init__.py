"""Deployment: what to run for a model (``recipe``) and whether vLLM would serve it (``plan``).

A wing above the simulator and late interaction: it asks them, it restates no rule.
"""

from .plan import Plan, plan
from .recipe import Recipe, recipe

__all__ = ["Plan", "Recipe", "plan", "recipe"]
