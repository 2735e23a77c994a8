"""
The native beacon/0.1 binding: submissions, status and the discovery
documents, mountable in any Twisted L{Site}.
"""

from beacon.bindings._native import NativeResources, StatusResource, SubmissionsResource

__all__ = ["NativeResources", "StatusResource", "SubmissionsResource"]
