"""hubd as the brand driver: OAuth command interface, login page, issued tokens."""
