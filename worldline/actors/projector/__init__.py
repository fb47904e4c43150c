"""The projector actor: read replicas that answer what agents ask of the world."""

__all__: list[str] = []
