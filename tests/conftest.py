from hypothesis import settings

pytest_plugins = ["alnair_common.testing.bus_fixtures", "alnair_common.testing.testplane"]

# No per-example deadline: the properties are about answers, not speed, and on the 2-core CI
# machine running the whole suite an example can take longer than hypothesis' 200 ms default
# (DeadlineExceeded there is load, not a finding).
settings.register_profile("alnair", deadline=None)
settings.load_profile("alnair")
