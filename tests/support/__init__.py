"""Helpers shared by the test folders: clips and scenes made by code, fakes, malformed inputs,
a real server, a browser, a terminal. Imported as ``tests.support.NAME``; subprocesses that
import them get the repository root on PYTHONPATH."""
