"""The local webhook: tokens, limits, device selection and speaker commands."""
