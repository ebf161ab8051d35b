"""The cache hydrator's settings (``ALNAIR_*`` environment variables or the TOML file)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from alnair_common import ServiceSettings
from alnair_common.tier_readers import ReaderKey

from ._source_rules import SourceRules, parse_profiles


class CacheHydratorSettings(ServiceSettings):
    cache_tier_url: str = Field(
        "", description="The tier: redis://host:port/db, redis-cluster://host:port[,host:port] "
                        "or dir:///path; empty: the directory <data_dir>/cache (local mode)")
    cache_budget_bytes: int = Field(8 << 30, gt=0, description="Bytes the tier may hold")
    cache_prefix: str = Field("alnair", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    cache_allowed_roots: str = Field(
        "", description="Comma-separated directories file:// sources may be under, for every "
                        "namespace; empty: none")
    cache_allowed_sources: str = Field(
        "", description="Comma-separated [NAMESPACE=]PREFIX rules: the sources each namespace "
                        "may have the cache read (s3://, s3://bucket[/prefix], file:///dir; no "
                        "NAMESPACE=: every namespace and local mode). Empty: none beyond "
                        "cache_allowed_roots (_source_rules.py)")
    cache_s3_endpoint_url: str | None = Field(
        None, description="S3 endpoint for s3:// sources; unset: AWS_ENDPOINT_URL or AWS")
    cache_s3_profiles: str = Field(
        "", description="Comma-separated NAMESPACE=PROFILE: the AWS credentials-file profile "
                        "each namespace's s3:// sources are read with; not named: the default "
                        "credentials")
    cache_concurrent_hydrations: int = Field(2, ge=1, le=64)
    cache_status_interval_seconds: float = Field(0.5, gt=0, le=60,
                                                 description="Least time between progress statuses")
    cache_tier_retry_seconds: float = Field(2.0, gt=0, le=600)
    cache_stats_interval_seconds: float = Field(
        15.0, gt=0, le=3600, description="How often the tier's size and hit counters are read "
                                         "for /metrics")
    cache_hydrate_threads: int = Field(
        4, ge=1, le=64, description="Files of one data set hydrated at once (S3 latency hides "
                                    "behind several requests in flight)")
    cache_hydrate_bytes_per_second: int = Field(
        0, ge=0, description="Read rate limit per hydration, so that hydrating does not starve "
                             "the training jobs sharing the source or network; 0: none")

    cache_reader_key: ReaderKey = Field(
        SecretStr(""), description="Key the per-namespace read-only tier users' passwords are "
                                   "derived from (alnair_common.tier_readers; the admission "
                                   "webhook holds the same). Empty: no users are made, pods get "
                                   "no tier. Only Redis tiers have users")
    cache_readers_interval_seconds: float = Field(
        30.0, gt=0, le=3600, description="How often the tier users are made again (a restarted "
                                         "Redis server has none until then)")

    cache_tier_nodes: str = Field(
        "", description="Comma-separated nodes on which the tier's bytes are local to a reader "
                        "(the node of a node-local dir:/// tier, the node a co-located Redis runs "
                        "on); published in each data set's status so the scheduler prefers them. "
                        "Empty: a dir:/// tier names this node (node_name); a Redis tier names "
                        "none, since it is equally far from every node (a Redis Cluster spreads "
                        "each data set over all its shards, so no shard's node holds it whole)")

    @field_validator("cache_tier_url")
    @classmethod
    def _tier_scheme(cls, value: str) -> str:
        if value and not value.startswith(("redis://", "rediss://", "redis-cluster://",
                                           "alluxio://", "dir:///")):
            raise ValueError(f"{value!r} must start with redis://, rediss://, redis-cluster://, "
                             "alluxio:// or dir:///")
        return value

    @field_validator("cache_allowed_sources")
    @classmethod
    def _sources_parse(cls, value: str) -> str:
        SourceRules.parse(value)
        return value

    @field_validator("cache_allowed_roots")
    @classmethod
    def _roots_parse(cls, value: str) -> str:
        SourceRules.parse("", value)
        return value

    @field_validator("cache_s3_profiles")
    @classmethod
    def _profiles_parse(cls, value: str) -> str:
        parse_profiles(value)
        return value

    @property
    def s3_profiles(self) -> dict[str, str]:
        return parse_profiles(self.cache_s3_profiles)

    @property
    def tier_url(self) -> str:
        return self.cache_tier_url or f"dir://{self.data_dir.resolve()}/cache"

    @property
    def tier_nodes(self) -> list[str]:
        """Where a data set this tier holds is hot (see ``cache_tier_nodes``)."""
        named = [n.strip() for n in self.cache_tier_nodes.split(",") if n.strip()]
        if named or not self.tier_url.startswith("dir://"):
            return named
        return [self.node_name]

    @property
    def source_rules(self) -> SourceRules:
        return SourceRules.parse(self.cache_allowed_sources, self.cache_allowed_roots)
