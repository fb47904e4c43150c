"""The simulator actor: grounded predictions from real transitions."""

__all__: list[str] = []
