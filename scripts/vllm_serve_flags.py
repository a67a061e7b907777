"""Writes ``tokpool/sim/vllm_rules/serve_flags.py``: every option of vLLM's ``vllm serve`` parser
with the number of values it takes, read from the INSTALLED vLLM (``make vllm``: 0.33.0).

Run: ``.venv/bin/python -m scripts.vllm_serve_flags``. The parser is vLLM's own:
``vllm/entrypoints/common/cli_args.py``, ``make_arg_parser`` (``FrontendArgs`` and the serve
command's options, then ``AsyncEngineArgs.add_cli_args``). ``tests/test_vllm_serve_line.py``
checks the written table against that parser, so a new vLLM shows up as a failing test.

The tables: ``SERVE_OPTIONS`` maps each option string (the ``--enable-x``, ``--disable-x`` and
``--no-x`` forms included, as vLLM's ``EnableDisableAction`` registers them) to its arity:
``"0"`` (a flag), ``"1"`` (one value), ``"?"`` (an optional value) or ``"+"`` (every value up to
the next option). ``FRONTEND_OPTIONS`` are the API server's own (host, port, keys, TLS, chat
templates, tool parsers, its logging): none reaches the engine. ``CANONICAL`` names the option
an alias or a negation belongs to (``-tp``: ``--tensor-parallel-size``,
``--disable-chunked-prefill``: ``--enable-chunked-prefill``); ``NEGATIVE_OPTIONS`` are the
forms that set a boolean option to False.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tokpool" / "sim" / "vllm_rules" / "serve_flags.py"


def serve_parser_options():
    """``{option: arity}`` of ``vllm serve`` (arity ``"0"``, ``"1"``, ``"?"`` or ``"+"``), the
    options that are not engine arguments (the API server's own), ``{option: canonical}`` for
    aliases and negations, and the negative forms of the boolean options."""
    from tokpool.pooler.vllm_bridge import prepare_vllm_environment

    prepare_vllm_environment()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    serve = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    engine = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    options: dict[str, str] = {}
    canonical: dict[str, str] = {}
    negative: set[str] = set()
    for option, action in serve._option_string_actions.items():
        if isinstance(action, argparse._HelpAction):
            continue
        name = "--" + action.dest.replace("_", "-")
        if name not in serve._option_string_actions:
            name = max(action.option_strings, key=len)
        if option != name:
            canonical[option] = name
        if option in getattr(action, "negative_option_strings", ()) or (
                isinstance(action, argparse.BooleanOptionalAction)
                and option.startswith("--no-") and option != name):
            negative.add(option)
        if action.nargs == 0:
            arity = "0"
        elif action.nargs in (None, 1):
            arity = "1"
        elif action.nargs == "?":
            arity = "?"
        else:  # "+", "*": every following value
            arity = "+"
        options[option] = arity
    frontend = frozenset(options) - frozenset(engine._option_string_actions)
    return options, frontend, canonical, frozenset(negative)


def _block(names) -> str:
    return textwrap.indent(textwrap.fill(" ".join(sorted(names)), 92, break_on_hyphens=False,
                                         break_long_words=False), "    ")


def render() -> str:
    import vllm

    options, frontend, canonical, negative = serve_parser_options()
    pairs = "\n".join(f"    {o!r}: {c!r}," for o, c in sorted(canonical.items()))
    by_arity = {a: [o for o, x in options.items() if x == a and o not in negative]
                for a in ("0", "1", "?", "+")}
    version = vllm.__version__
    return f'''"""Every option of vLLM {version}'s ``vllm serve`` and how many values it takes:
GENERATED from vLLM's own parser by ``scripts/vllm_serve_flags.py`` (see it for what each
table holds), checked against that parser by ``tests/test_vllm_serve_line.py``. Rerun the
script for another vLLM; do not edit by hand.
"""

from __future__ import annotations

__all__ = ["CANONICAL", "FRONTEND_OPTIONS", "NEGATIVE_OPTIONS", "SERVE_OPTIONS",
           "VLLM_SERVE_VERSION"]

VLLM_SERVE_VERSION = "{version}"


def _options(text: str) -> list[str]:
    return text.split()


_NO_VALUE = _options("""
{_block(by_arity["0"])}
""")
_ONE_VALUE = _options("""
{_block(by_arity["1"])}
""")
_OPTIONAL_VALUE = _options("""
{_block(by_arity["?"])}
""")
_VALUES = _options("""
{_block(by_arity["+"])}
""")

NEGATIVE_OPTIONS: frozenset[str] = frozenset(_options("""
{_block(negative)}
"""))

SERVE_OPTIONS: dict[str, str] = {{
    **dict.fromkeys(_NO_VALUE, "0"), **dict.fromkeys(NEGATIVE_OPTIONS, "0"),
    **dict.fromkeys(_ONE_VALUE, "1"), **dict.fromkeys(_OPTIONAL_VALUE, "?"),
    **dict.fromkeys(_VALUES, "+"),
}}

FRONTEND_OPTIONS: frozenset[str] = frozenset(_options("""
{_block(frontend)}
"""))

CANONICAL: dict[str, str] = {{
{pairs}
}}
'''


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
