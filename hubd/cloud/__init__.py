"""The platform side: event API client, token manager, wire models."""
