"""hubd's Debian packages: `python -m debpkg.build --arch arm64` (docs/packaging.md)."""
