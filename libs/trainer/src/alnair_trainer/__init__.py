"""What runs inside an Alnair training worker (the job's own Python; torch is the job's).

:class:`ElasticTrainer` is the trainer of launcher ``torch-inprocess``: it meets its peers in
the job's c10d rendezvous itself and keeps its process — and its model in memory — when a
peer dies or the world is resized, where torchrun would start every trainer again.
"""

from ._elastic import (
    CONF_ENV,
    ENDPOINT_ENV,
    ID_ENV,
    NODES_ENV,
    PROGRESS_ENV,
    ElasticTrainer,
    Stateful,
    TrainerConfigError,
)

__all__ = ["CONF_ENV", "ENDPOINT_ENV", "ID_ENV", "NODES_ENV", "PROGRESS_ENV", "ElasticTrainer", "Stateful",
           "TrainerConfigError"]
