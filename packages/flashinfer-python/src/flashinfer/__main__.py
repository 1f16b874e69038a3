"""``python -m flashinfer``: the command-line entry point (``show-config``)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m flashinfer <command>``; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m flashinfer")
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser(
        "show-config",
        help="what is installed, which devices are seen and which implementation each op uses there",
    )
    show.add_argument(
        "--markdown", action="store_true", help="print the README's routing tables instead (any machine)"
    )
    args = parser.parse_args(argv)
    if args.command == "show-config":
        from ._config import routes_markdown, show_config

        print(routes_markdown() if args.markdown else show_config())
    return 0


if __name__ == "__main__":
    sys.exit(main())
