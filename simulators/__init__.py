"""Simulated devices, speakers and the smart-speaker platform, for tests and the demo."""
