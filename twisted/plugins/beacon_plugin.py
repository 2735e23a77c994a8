"""
The C{twistd beacon} plugin: one line, importing nothing heavy.
"""

from twisted.application.service import ServiceMaker

beacon = ServiceMaker(
    "Beacon",
    "beacon.tap",
    "An A2A 1.0 front door for a human-read inbox.",
    "beacon",
)
