# Deploy Beacon from a file:  twistd -ny etc/beacon.tac
#
# The same service tree as `twistd beacon`, configured by etc/beacon.toml (or
# the file named by the BEACON_CONFIG environment variable).
import os

from twisted.application.service import Application
from twisted.internet import reactor

from beacon.config import build_config, read_file
from beacon.service import HeapFreeze, makeService

config_path = os.environ.get(
    "BEACON_CONFIG", os.path.join(os.path.dirname(os.path.abspath(__file__)), "beacon.toml")
)
application = Application("beacon")
makeService(build_config(read_file(config_path)), reactor).setServiceParent(application)
# Last: once everything has started, the start-up heap is frozen (see HeapFreeze).
HeapFreeze(reactor).setServiceParent(application)
