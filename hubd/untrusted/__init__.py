"""Checks of untrusted JSON before anything is built from it: nesting depth, value kinds, arrays read
element by element within a budget."""
