"""
Beacon: a standard Agent2Agent (A2A 1.0) front door for a human-read inbox.

Agents discover Beacon through its agent card and submit messages; every
submission is stored append-only and answered with a receipt. See README.rst and the manual in docs/.
"""

__version__ = "0.1.0"
