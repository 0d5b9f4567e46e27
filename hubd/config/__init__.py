"""hubd's config file: its models, reading YAML into them, key paths and secrets, host names."""
