"""Alnair cache hydrator: hydrates data sets into the content-addressed cache tier."""

from ._domain import AddRequest, DatasetSpec, DatasetStatus, Phase, RemoveRequest
from ._errors import CacheHydratorError, InvalidRequestError, TierBusyError
from ._service import CacheHydratorService
from ._settings import CacheHydratorSettings
from ._source_rules import SourceRule, SourceRules

__all__ = ["AddRequest", "CacheHydratorError", "CacheHydratorService", "CacheHydratorSettings",
           "DatasetSpec", "DatasetStatus", "InvalidRequestError", "Phase", "RemoveRequest",
           "SourceRule", "SourceRules", "TierBusyError"]
