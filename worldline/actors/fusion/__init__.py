"""The fusion actor: evidence in, posteriors out (the one home of the belief math)."""

__all__: list[str] = []
