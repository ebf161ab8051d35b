"""The cache hydrator's Prometheus metrics (served on the health port's ``/metrics``)."""

from prometheus_client import Counter, Gauge

SOURCE_READ = Counter("alnair_cache_hydrator_source_read_bytes_total",
                      "Bytes read from data set sources while hydrating.")
STORED = Counter("alnair_cache_hydrator_stored_bytes_total",
                 "Bytes of new chunks stored in the tier (what dedup did not find there).")
FILES = Counter("alnair_cache_hydrator_files_total", "Files hydrated into the tier.")
OUTCOMES = Counter("alnair_cache_hydrator_hydrations_total",
                   "Hydrations ended, by phase and reason code (bounded: CacheDatasetStatus.reason).",
                   ["phase", "reason"])
EVICTIONS = Counter("alnair_cache_hydrator_evictions_total",
                    "Data sets evicted to make room for another.")
TIER_STORED = Gauge("alnair_cache_tier_stored_bytes", "Bytes the tier stores (each chunk once).")
TIER_BUDGET = Gauge("alnair_cache_tier_budget_bytes", "Bytes the tier may store.")
TIER_HITS = Counter("alnair_cache_tier_hits",
                    "Lookups of the tier that found their key (Redis keyspace_hits over all its servers).")
TIER_MISSES = Counter("alnair_cache_tier_misses",
                      "Lookups of the tier that found nothing (Redis keyspace_misses over all its servers).")
DATASET_PROGRESS = Gauge("alnair_cache_dataset_progress_ratio",
                         "Cached bytes over total bytes of each data set (1 once READY).",
                         ["namespace", "dataset"])
DATASET_BYTES = Gauge("alnair_cache_dataset_cached_bytes", "Bytes of each data set in the tier.",
                      ["namespace", "dataset"])
TIER_READERS = Gauge("alnair_cache_tier_reader_users",
                     "Read-only tier users kept, one per namespace with data sets (0: none made).")
