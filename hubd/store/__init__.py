"""SQLite storage: one connection, WAL, versioned migrations."""
