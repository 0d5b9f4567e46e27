"""hubd: a smart-home hub daemon."""

__version__ = "0.1.0"
