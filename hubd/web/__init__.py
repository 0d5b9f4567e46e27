"""HTTP server and its routes."""
