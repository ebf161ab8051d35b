"""Alnair local agent."""

from ._service import LocalAgentService

__all__ = ["LocalAgentService"]
