"""hubd's benchmark suite: `python -m bench` (see BENCHMARKS.md). Never collected by pytest."""
