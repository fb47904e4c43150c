"""``python -m worldline.cli``: the ``worldline`` command without its console script."""

from worldline.cli.app import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
