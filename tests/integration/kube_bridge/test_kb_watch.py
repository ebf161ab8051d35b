"""The watch loop against the real apiserver: it lists once, then resumes every watch from
its last resourceVersion, so objects created between two watch requests are neither lost
nor delivered twice."""

from __future__ import annotations

import threading
import time
from functools import partial

from kb_support import alnair_pod

from alnair_common.testing import wait_until
from alnair_common.testing.kube import KubeNamespace
from alnair_kube_bridge import Changed, ResourceWatch, Synced


def test_watch_resumes_from_resource_version_across_server_timeouts(
        kube: KubeNamespace) -> None:
    kube.core.create_namespaced_pod(kube.namespace, alnair_pod("before"))
    items: list[Synced | Changed] = []
    watch = ResourceWatch("pods", partial(kube.core.list_namespaced_pod, kube.namespace),
                          items.append, watch_timeout_seconds=1)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        synced = wait_until(lambda: [i for i in items if isinstance(i, Synced)], timeout=20,
                            what="initial list")
        assert [p["metadata"]["name"] for p in synced[0].items] == ["before"]
        names = [f"p{i}" for i in range(5)]
        for name in names:  # spread over several 1 s watch requests
            kube.core.create_namespaced_pod(kube.namespace, alnair_pod(name))
            time.sleep(0.6)
        added = wait_until(
            lambda: (lambda got: got if len(got) >= len(names) else None)(
                [i.obj["metadata"]["name"] for i in items
                 if isinstance(i, Changed) and i.type == "ADDED"]),
            timeout=20, what="every ADDED event")
        time.sleep(1.5)  # one more server timeout: a replay would show up now
        added = [i.obj["metadata"]["name"] for i in items
                 if isinstance(i, Changed) and i.type == "ADDED"]
        assert added == names
        assert watch.relists == 1
    finally:
        watch.stop()
        thread.join(10)
    assert not thread.is_alive()
