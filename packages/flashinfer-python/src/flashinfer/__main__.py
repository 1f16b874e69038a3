"""The ``flashinfer`` command (also ``python -m flashinfer``), with FlashInfer's CLI conventions.

- ``flashinfer --version``: this package's version;
- ``flashinfer show-config``: what is installed, the environment variables this package reads,
  the devices seen and which implementation serves each op on each of them (``--markdown``:
  the README's routing tables instead);
- ``flashinfer list-modules [OP]``: the ops, by package, with their backend names; one op in
  detail (what each implementation runs for it). Upstream's "modules" are its JIT-compiled
  kernels; here nothing is compiled ahead, so the unit is the op;
- ``flashinfer module-status [--detailed] [--filter KIND]``: which implementation serves each
  op on each device present (``--filter``: only ops served by ``reference``, ``cuda`` or
  ``mate``).

Usage and errors name the program as it was invoked.
"""

from __future__ import annotations

import argparse
import os
import sys


def _program_name() -> str:
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "flashinfer"
    # `python -m flashinfer` runs this file: argv[0] is its path
    return "python -m flashinfer" if invoked in ("__main__.py", "-m", "-c") else invoked


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=prog or _program_name(),
        description="FlashInfer v0.6.17's API on MUSA (MATE), CUDA and every other PyTorch device.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = commands.add_parser(
        "show-config",
        help="what is installed, the environment, the devices seen and which implementation serves each op",
    )
    show.add_argument(
        "--markdown", action="store_true", help="print the README's routing tables instead (any machine)"
    )
    modules = commands.add_parser("list-modules", help="the ops by package, or one op in detail")
    modules.add_argument("op", nargs="?", help="an op (function) name, e.g. bmm_fp8")
    status = commands.add_parser(
        "module-status", help="which implementation serves each op on each device here"
    )
    status.add_argument("--detailed", action="store_true", help="also say what each implementation runs")
    status.add_argument(
        "--filter", choices=("reference", "cuda", "mate"), help="only the ops this implementation serves"
    )
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the command; returns the process exit code. Output cut short by its reader
    (``flashinfer show-config | head``) ends the command quietly, as other command-line tools do."""
    try:
        return _run(argv, prog)
    except BrokenPipeError:
        # the reader is gone: point stdout at /dev/null so the interpreter's final flush is silent
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(argv: list[str] | None, prog: str | None) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from . import _config

    if args.command == "show-config":
        print(_config.routes_markdown() if args.markdown else _config.show_config())
    elif args.command == "list-modules":
        if args.op is None:
            print(_config.list_ops())
        else:
            text = _config.describe_op(args.op)
            if text is None:
                parser.error(f"unknown op {args.op!r}; `{parser.prog} list-modules` lists them")
            print(text)
    else:
        print(_config.op_status(detailed=args.detailed, kind=args.filter))
    return 0


if __name__ == "__main__":
    sys.exit(main())
