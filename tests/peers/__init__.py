"""
Helpers for the end-to-end and interop tests: starting Beacon the way a user
does (a real C{twistd} process) and real peers that talk to it.
"""
