"""worldline's wire contract: messages, subjects, streams and consumers. No I/O."""

from worldline.protocols import messages, subjects

__all__ = ["messages", "subjects"]
