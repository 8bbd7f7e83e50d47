"""pytest plugin: fixtures shared by every test layer (filled in by the ZooKeeper harness)."""
