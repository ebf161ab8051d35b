"""The package's errors: one root, :class:`OpenDataError`; each message says what to do."""


class OpenDataError(Exception):
    """Root of alnair_opendata's errors."""


class DatasetNotFoundError(OpenDataError):
    """No published dataset (or no such run) where it was looked for."""


class RecordingError(OpenDataError):
    """A recorder's output directory that ``convert`` cannot read (missing files, bad rows)."""


class SchemaMismatchError(OpenDataError):
    """Data whose columns or units are not the schema's (recorded by another version)."""
