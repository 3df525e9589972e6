"""The certified core: what every mechanism's guarantee rests on.

- :mod:`dpselect.core.exact`: exact (rational and interval) arithmetic, the one home of the
  certified bounds (e^x, powers, square roots, the normal distribution's CDF and tails, atanh);
- :mod:`dpselect.core.theory`: the paper's closed forms (pi_opt's keep probabilities, the TSGD
  release's calibration) in exact arithmetic;
- :mod:`dpselect.core.tables`: the quantized tables the C kernel samples from, built and
  certified before use;
- :mod:`dpselect.core.verify`: the independent verifier that re-checks every table's DP
  inequalities (it keeps its own e^x bound on purpose: a bug in one cannot hide in the other);
- :mod:`dpselect.core.params`: validation of (epsilon, delta, kappa) and the other public parameters;
- :mod:`dpselect.core.guarantee`: :class:`PrivacyGuarantee`, the statement every release carries;
- :mod:`dpselect.core.limits`: how much certification work each mechanism may do, from the
  public parameters alone.

The C kernel (``csrc/``) only ever samples from tables certified here
(docs/privacy/README.md; docs/architecture.md).

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
