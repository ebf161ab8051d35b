pytest_plugins = ["alnair_common.testing.bus_fixtures"]
