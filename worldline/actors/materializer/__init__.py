"""The materializer actor: the single writer of each world's canonical state."""

__all__: list[str] = []
