"""`python -m function [serve flags]` serves; `python -m function render ...` renders."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["render"]:
        # Imported here so the serving process never loads the render path.
        from function import render  # noqa: PLC0415 - keep it off the serving path

        render.cli(args=sys.argv[2:], prog_name="python -m function render")
    else:
        from function import main as serve  # noqa: PLC0415 - and render off this one

        serve.cli()


if __name__ == "__main__":
    main()
