"""worldline's actors: one package each, plus the shared runtime shell."""

__all__: list[str] = []
