pytest_plugins = ["alnair_common.testing.bus_fixtures", "alnair_common.testing.testplane"]
