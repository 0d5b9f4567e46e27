"""The local webhook: tokens, limits, device selection and speaker commands (SPEC.md 2.8, 4.6, 8)."""
