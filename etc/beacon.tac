# Deploy Beacon from a file:  twistd -ny etc/beacon.tac
#
# The same service tree as `twistd beacon`, configured by etc/beacon.toml (or
# the file named by the BEACON_CONFIG environment variable), and the same
# start-up guard: a failure to start exits 1 with its reason on one line.
import os

from beacon.tap import application as beacon_application

config_path = os.environ.get(
    "BEACON_CONFIG", os.path.join(os.path.dirname(os.path.abspath(__file__)), "beacon.toml")
)
application = beacon_application(config_path)
