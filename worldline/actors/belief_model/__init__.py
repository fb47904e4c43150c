"""The belief model every actor shares: one home for logic more than one actor uses.

- :mod:`~worldline.actors.belief_model.posterior`: the belief math (evidence to
  posterior, decay, trust, influence, effective confidence), defined once.
- :mod:`~worldline.actors.belief_model.text`: text normalisation, the key that makes a
  restatement meet the belief it restates, and belief ids.
- :mod:`~worldline.actors.belief_model.embedding`: the embedders (hashing by default,
  WordLlama with the ``semantic`` extra, MiniLM where its package is installed) and
  cosine similarity.
- :mod:`~worldline.actors.belief_model.reliability`: source reliability learned from
  agreement, rival answers and copy detection (a pure core, measured by
  ``bench/judgment.py``; fusion's ``AssessSources`` runs it).
- :mod:`~worldline.actors.belief_model.calibration`: calibration of posteriors against
  their own record (Brier, expected calibration error, the reliability curve) and the
  monotone recalibration map learned from it (Platt or isotonic, once there is enough
  record; measured by ``bench/judgment.py``).
- :mod:`~worldline.actors.belief_model.charter`: a world's declaration as every actor
  applies it: which declarations are accepted, whose voice evidence counts as, who
  may set trust and settle contradictions.

Actors import from here, never from one another (``tests/test_layout.py`` checks).
"""

__all__: list[str] = []
