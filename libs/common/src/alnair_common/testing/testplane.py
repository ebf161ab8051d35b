"""pytest plugin: the real test plane — Kubernetes, kwok, MongoDB-wire, Prometheus, Redis.

Enable with ``pytest_plugins = ["alnair_common.testing.testplane"]``. Servers that are
slow to start (kube-apiserver + etcd, kwok, FerretDB, redis-server) run once per session;
each test gets isolation instead: its own namespace, database or logical Redis database.
Prometheus is cheap to start and runs per call of its factory.

The binaries come from ``$ALNAIR_TESTBIN`` or the cache of ``scripts/testbin``; when one is
missing the fixture errors with the command to run. Nothing here skips: a test that asked
for a real server and cannot have one is an error.

Fixtures:
  ``kube``        KubeNamespace: namespace, api_client, kubeconfig, kubectl(), plane
  ``kube_plane``  the session's KubePlane (etcd + kube-apiserver, project CRDs applied)
  ``kwok_nodes``  KwokNodes factory: ``kwok_nodes(count, gpus_per_node, gpu_memory_gib)``
  ``mongo``       MongoDatabase: name, url, client, db (fresh per test)
  ``prometheus``  factory: ``prometheus(["127.0.0.1:8000"])`` -> PrometheusServer
  ``promtool``    ``promtool(exposition_text) -> list of complaints``
  ``redis``       RedisDatabase: db, url, prefix, client (flushed per test)
  ``alluxio``     an ``alluxio://host:port/root`` tier URL with a fresh root (session server)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from pymongo import MongoClient

from .alluxio import AlluxioServer, start_alluxio
from .kube import (
    KubeNamespace,
    KubePlane,
    close_namespace,
    open_namespace,
    project_crd_files,
    start_kube_plane,
)
from .kwok import KwokController, KwokNodes, start_kwok
from .mongo import MongoDatabase, MongoServer, database_name_for, start_mongo
from .prometheus import PrometheusServer, check_metrics, start_prometheus
from .redis import DatabaseAllocator, RedisDatabase, RedisServer, start_redis
from .testbin import Testbin, locate


@pytest.fixture(scope="session")
def testplane_bin() -> Testbin:
    """The directory of pinned test binaries (fails loudly if ``scripts/testbin`` never ran)."""
    return locate()


@pytest.fixture(scope="session")
def kube_plane(testplane_bin: Testbin, tmp_path_factory: pytest.TempPathFactory,
               pytestconfig: pytest.Config) -> Iterator[KubePlane]:
    plane = start_kube_plane(testplane_bin, tmp_path_factory.mktemp("kube-plane"))
    try:
        plane.apply_crd_files(project_crd_files(Path(pytestconfig.rootpath)))
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube(kube_plane: KubePlane, request: pytest.FixtureRequest,
         tmp_path: Path) -> Iterator[KubeNamespace]:
    ns = open_namespace(kube_plane, request.node.name, tmp_path)
    try:
        yield ns
    finally:
        close_namespace(ns)


@pytest.fixture(scope="session")
def kwok_controller(kube_plane: KubePlane,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[KwokController]:
    controller = start_kwok(kube_plane, tmp_path_factory.mktemp("kwok"))
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture
def kwok_nodes(kwok_controller: KwokController, kube: KubeNamespace) -> Iterator[KwokNodes]:
    nodes = KwokNodes(kube.api_client, name_prefix=f"kwok-{kube.namespace[2:14].rstrip('-')}")
    try:
        yield nodes
    finally:
        nodes.delete_all()


@pytest.fixture(scope="session")
def mongo_server(testplane_bin: Testbin,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoServer]:
    server = start_mongo(testplane_bin, tmp_path_factory.mktemp("ferretdb"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mongo_client(mongo_server: MongoServer) -> Iterator[MongoClient]:
    client = mongo_server.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def mongo(mongo_server: MongoServer, mongo_client: MongoClient,
          request: pytest.FixtureRequest) -> Iterator[MongoDatabase]:
    name = database_name_for(request.node.name)
    try:
        yield MongoDatabase(name, f"{mongo_server.url}{name}", mongo_client, mongo_client[name])
    finally:
        mongo_client.drop_database(name)


@pytest.fixture
def prometheus(testplane_bin: Testbin,
               tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], *, scrape_interval: str = "1s") -> PrometheusServer:
        server = start_prometheus(testplane_bin, tmp_path / f"prometheus-{len(started)}",
                                  targets, scrape_interval=scrape_interval)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def promtool(testplane_bin: Testbin) -> Callable[[str], list[str]]:
    return lambda exposition: check_metrics(testplane_bin, exposition)


@pytest.fixture(scope="session")
def redis_server(testplane_bin: Testbin,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(testplane_bin, tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_databases(redis_server: RedisServer) -> DatabaseAllocator:
    return DatabaseAllocator(redis_server)


@pytest.fixture
def redis(redis_databases: DatabaseAllocator) -> Iterator[RedisDatabase]:
    database = redis_databases.allocate()
    try:
        yield database
    finally:
        try:
            database.client.flushdb()
        finally:
            database.client.close()


@pytest.fixture(scope="session")
def alluxio_server(testplane_bin: Testbin,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlluxioServer]:
    server = start_alluxio(testplane_bin, tmp_path_factory.mktemp("alluxio"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def alluxio(alluxio_server: AlluxioServer) -> Iterator[str]:
    url = alluxio_server.root()
    try:
        yield url
    finally:
        alluxio_server.remove(url.removeprefix(alluxio_server.url))
