"""Agents and a fake outside service that tests and the crash campaign run in subprocesses."""
