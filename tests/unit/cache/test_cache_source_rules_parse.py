"""The operator's rules on which sources each namespace may have the cache read."""

from __future__ import annotations

import pytest

from alnair_cache_hydrator import CacheHydratorSettings, SourceRules
from alnair_dataset import InvalidSpecError, PathNotAllowedError

RULES = "team-a=s3://data-a,team-b=s3://shared/b/imgs,s3://public-sets,team-b=file:///srv/b"


def allowed(rules: SourceRules, namespace: str, uri: str) -> bool:
    try:
        rules.check(namespace, uri)
    except PathNotAllowedError:
        return False
    return True


@pytest.mark.parametrize(("namespace", "uri", "ok"), [
    ("team-a", "s3://data-a", True),
    ("team-a", "s3://data-a/any/prefix/", True),
    ("team-b", "s3://data-a/x", False),  # another namespace's bucket
    ("", "s3://data-a/x", False),  # local data sets get only the rules without a namespace
    ("team-b", "s3://shared/b/imgs", True),
    ("team-b", "s3://shared/b/imgs/train", True),
    ("team-b", "s3://shared/b/imgs2", False),  # whole segments, not string prefixes
    ("team-b", "s3://shared/b", False),  # wider than the rule
    ("team-b", "s3://shared", False),
    ("team-a", "s3://public-sets/coco", True),  # a rule for every namespace
    ("", "s3://public-sets", True),
    ("team-a", "s3://public-sets-private/x", False),
    ("team-b", "file:///srv/b/train", True),
    ("team-a", "file:///srv/b/train", False),
    ("team-b", "file:///srv/b/../a", False),  # resolved before it is compared
    ("team-b", "file:///srv/bb", False),
])
def test_a_source_is_allowed_only_by_a_rule_for_its_namespace(namespace, uri, ok):
    assert allowed(SourceRules.parse(RULES), namespace, uri) is ok


@pytest.mark.parametrize(("uri", "readers"), [
    ("s3://data-a/x/1", {"team-a", "team-c"}),
    ("s3://data-a/y", {"team-a"}),
    ("s3://shared/b/imgs/train", {"team-b"}),
    ("s3://public-sets/coco", None),  # every namespace: its chunks are shared by all
    ("s3://nobody", set()),
    ("file:///srv/b/x", {"team-b"}),
])
def test_the_namespaces_a_source_may_be_cached_for(uri, readers):
    """Which namespaces share a source's chunk addresses (the hydrator keys them by these)."""
    rules = SourceRules.parse(RULES + ",team-c=s3://data-a/x")
    assert rules.readers(uri) == (None if readers is None else frozenset(readers))


def test_no_rules_allow_nothing_and_the_refusal_says_what_would(tmp_path):
    with pytest.raises(PathNotAllowedError) as refused:
        SourceRules.parse("").check("team-a", "s3://bucket/x")
    message = str(refused.value)
    assert "for namespace 'team-a' (allowed: none)" in message
    assert "ALNAIR_CACHE_ALLOWED_SOURCES='team-a=s3://bucket/prefix'" in message
    # a tenant is told the rules that apply to it, never another namespace's
    with pytest.raises(PathNotAllowedError) as refused:
        SourceRules.parse(RULES).check("team-a", "s3://shared/b/imgs")
    assert "(allowed: s3://data-a, s3://public-sets)" in str(refused.value)
    assert "shared" not in str(refused.value).split("allowed:")[1]


def test_every_bucket_and_roots(tmp_path):
    (tmp_path / "allowed").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "allowed" / "escape").symlink_to(tmp_path / "secret")
    rules = SourceRules.parse("s3://", roots=str(tmp_path / "allowed"))
    assert allowed(rules, "any-ns", "s3://whatever/prefix")
    assert allowed(rules, "", f"file://{tmp_path}/allowed/x")
    assert not allowed(rules, "", f"file://{tmp_path}/secret")
    assert not allowed(rules, "", f"file://{tmp_path}/allowed/escape")  # a link out
    assert not allowed(rules, "", f"file://{tmp_path}/allowed/../secret")
    with pytest.raises(PathNotAllowedError, match=r"\(resolved: .*/secret\)"):
        rules.check("", f"file://{tmp_path}/allowed/escape")


@pytest.mark.parametrize("uri", ["s3://data-a/x/../../other", "s3://data-a/./x", "s3://data-a//x",
                                 "s3://data-a/x//y"])
def test_s3_prefixes_a_file_system_could_resolve_are_refused(uri):
    # S3 keeps '..' literally; a server backed by a file system (versitygw's posix backend,
    # a gateway to NFS) may resolve it out of the prefix the rule allows
    with pytest.raises(InvalidSpecError, match="empty, '.' or '..' segment"):
        SourceRules.parse("s3://data-a").check("", uri)


@pytest.mark.parametrize(("text", "error"), [
    ("Team_A=s3://x", "'Team_A' is not a namespace"),
    ("team-a=http://x/y", "must be [NAMESPACE=]s3://[bucket[/prefix]] or [NAMESPACE=]file:///directory"),
    ("file://relative/dir", "must be [NAMESPACE=]s3://"),
    ("s3://b/../c", "'..' segment"),
    ("s3://b/p?x=1", "no query or fragment"),
])
def test_a_bad_rule_stops_the_service_with_what_is_wrong(text, error):
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")
                       .replace("?", r"\?")):
        CacheHydratorSettings(cache_allowed_sources=text)


def test_a_relative_root_is_refused():
    with pytest.raises(ValueError, match="must be an absolute directory"):
        CacheHydratorSettings(cache_allowed_roots="data/sets")


def test_s3_profiles_per_namespace():
    s = CacheHydratorSettings(cache_s3_profiles="team-a=reader-a, team-b=b.ro")
    assert s.s3_profiles == {"team-a": "reader-a", "team-b": "b.ro"}
    for bad in ("team-a", "Team=x", "team-a=", "team-a=x y", "team-a=x,team-a=y"):
        with pytest.raises(ValueError, match="ALNAIR_CACHE_S3_PROFILES"):
            CacheHydratorSettings(cache_s3_profiles=bad)
