"""The extractor actor: artifacts and traces in, beliefs and transitions out."""

__all__: list[str] = []
