"""Reading a table's data files into Arrow: partition values, column mapping, deletion vectors.

Data files are Parquet files named by file actions (``add``, ``remove``, ``cdc``). Reading one
means: fetch it through :func:`logstores.open_filesystem` (the same storage options as the log),
select the physical columns of the requested logical columns (``delta.columnMapping.mode``
``name``: by physical name, ``id``: by Parquet field id, falling back to the physical name),
rename them to logical names (nested fields too), cast to the table schema's Arrow types, fill
columns the file lacks with nulls, add partition columns from the action's ``partitionValues``
(Delta's string serialisation; a missing key or ``null`` is a null) and drop the rows the file's
deletion vector marks as deleted. Local files without deletion vectors are scanned together as
Arrow datasets (decoded batch by batch on Arrow's thread pool); other files are read concurrently
(Arrow decoding releases the GIL; object-store requests overlap). A missing file raises
:class:`DataFileNotFoundError`, an unreadable one :class:`CorruptDataFileError`, naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstores import local_path
from logstores.filesystem import uri_scheme
from replay.data.columns import FieldFinder, arrow_field, conform_column
from replay.data.deletion_vector_reads import (
    DeletionVectorCache,
    RowFilter,
    dv_key,
    file_deletion_vectors,
    read_deletion_vectors,
)
from replay.data.deletion_vectors import DeletionVectorDescriptorLike, dv_location, read_deletion_vector
from replay.data.dictionaries import (
    DECODE_ROWS,
    decode_dictionary,
    is_dictionary_of,
    scan_dictionary_columns,
)
from replay.data.parquet_files import (
    LOCAL_ARROW_FS,
    DataFileNotFoundError,
    corrupt_data_file_error,
    dataset_format,
    is_format_error,
    open_parquet,
    parquet_source,
    scan_local,
)
from replay.data.partition_values import partition_value_array
from replay.log.concurrency import Work, default_threads, map_concurrently
from replay.protocol.actions import FileAction, Metadata, Protocol
from replay.protocol.column_mapping import partition_value
from replay.protocol.paths import resolve_path
from replay.protocol.schema import StructField, StructType, arrow_type
from replay.protocol.table_config import check_readable

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableReader:
    """What is needed to read any data file of one table version (picklable).

    Build it with :meth:`for_metadata`. ``conf`` holds the storage settings for the data files.
    """

    table_path: str
    schema: StructType
    partition_columns: tuple[str, ...]
    column_mapping_mode: str
    conf: Mapping[str, str]
    dv_cache: DeletionVectorCache = field(default_factory=DeletionVectorCache, compare=False, repr=False)

    @classmethod
    def for_metadata(
        cls,
        table_path: str,
        metadata: Metadata,
        protocol: Protocol | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> TableReader:
        """A reader for the table described by ``metadata``.

        Raises :class:`replay.protocol.errors.UnsupportedTableFeatureError` if ``protocol`` needs a reader
        version or feature this library cannot read.
        """
        if protocol is not None:
            check_readable(protocol, table_path)
        return cls(
            table_path=table_path.rstrip("/"),
            schema=metadata.schema,
            partition_columns=tuple(metadata.partition_columns or ()),
            column_mapping_mode=metadata.column_mapping_mode,
            conf=dict(conf or {}),
        )

    @property
    def concurrency(self) -> int:
        """How many files to read at once: more for object stores than for local disk."""
        return default_threads(Work.DATA, uri_scheme(self.table_path) in ("", "file", "memory"))

    # -- schema -------------------------------------------------------------------------------
    def read_fields(self, columns: Sequence[str] | None = None) -> list[StructField]:
        """The schema fields for ``columns`` (all when ``None``), in the order asked.

        Raises :class:`KeyError` naming an unknown column.
        """
        if columns is None:
            return list(self.schema.fields)
        return [self.schema.field(name) for name in columns]

    def arrow_schema(self, columns: Sequence[str] | None = None) -> pa.Schema:
        """The Arrow schema (logical names) of what :meth:`read_file` returns for ``columns``."""
        return pa.schema([arrow_field(f) for f in self.read_fields(columns)])

    # -- reading ------------------------------------------------------------------------------
    def file_uri(self, file: FileAction) -> str:
        """The URI of ``file``'s data file."""
        return resolve_path(self.table_path, file.path)

    def deletion_filter(
        self, file: FileAction, known: Mapping[str, np.ndarray] | None = None
    ) -> RowFilter | None:
        """The rows ``file``'s deletion vector drops (:meth:`deletion_vector_rows`), or ``None``."""
        for descriptor in file_deletion_vectors(file):
            indexes = self.deletion_vector_rows(descriptor, known)
            return RowFilter(indexes, source=dv_location(descriptor, self.table_path))
        return None

    def deletion_vector_rows(
        self, descriptor: DeletionVectorDescriptorLike, known: Mapping[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """The rows ``descriptor`` deletes: from ``known`` (by ``dv_key``), from what this reader
        read ahead, else read now."""
        indexes = known.get(dv_key(descriptor)) if known else None
        if indexes is None:
            indexes = self.dv_cache.get(descriptor)
        if indexes is None:
            indexes = read_deletion_vector(descriptor, self.table_path, self.conf)
        return indexes

    def read_deletion_vectors(self, files: Iterable[FileAction]) -> dict[str, np.ndarray]:
        """The DVs of ``files`` not read ahead, with one request per DV file
        (:func:`~replay.data.deletion_vector_reads.read_deletion_vectors`), by ``dv_key``."""
        missing = self.dv_cache.missing(files)
        return read_deletion_vectors(missing, self.table_path, self.conf, self.concurrency) if missing else {}

    def prefetch_deletion_vectors(self, files: Iterable[FileAction]) -> None:
        """Read the DVs of ``files`` now (:meth:`read_deletion_vectors`) and keep them for
        :meth:`deletion_filter`, until ``dv_cache.forget(files)`` or for as long as this reader
        lives (one operation's reader)."""
        self.dv_cache.update(self.read_deletion_vectors(files))

    def read_file(
        self,
        file: FileAction,
        columns: Sequence[str] | None = None,
        *,
        row_filter: RowFilter | bool | None = True,
        extra_columns: Sequence[pa.Field] = (),
        ignore_missing: bool = False,
        keep_dictionaries: bool = False,
        data: bytes | None = None,
    ) -> pa.Table:
        """The rows of one data file as a table with logical column names.

        ``row_filter=True`` applies the file's own deletion vector, ``False``/``None`` keeps every
        row, a :class:`RowFilter` selects rows explicitly. ``extra_columns`` are read from the file
        as stored (e.g. ``_change_type`` of CDC files; nulls if absent), decoded as dictionaries
        (they hold a handful of values) and cast. ``keep_dictionaries``: string and binary columns
        the file stores dictionary-encoded throughout come as dictionary arrays of their logical type
        (:mod:`replay.data.dictionaries`); otherwise, in a file of at least
        :data:`~replay.data.dictionaries.DECODE_ROWS` rows, such columns are read as dictionaries
        and decoded here, faster than the Parquet reader decodes them. Raises
        :class:`DataFileNotFoundError` naming the file when it is missing, unless
        ``ignore_missing`` (then the result is empty). ``data``: the file's bytes, already fetched.
        """
        fields = self.read_fields(columns)
        if row_filter is True:
            row_filter = self.deletion_filter(file)
        elif row_filter is False:
            row_filter = None
        uri = self.file_uri(file)
        data_fields = [f for f in fields if f.name not in self.partition_columns]
        try:
            size = getattr(file, "size", None)
            source = parquet_source(uri, self.conf, size) if data is None else pa.BufferReader(data)
            try:
                parquet = open_parquet(source)
                layout = _Layout.of(
                    parquet.schema_arrow, data_fields, extra_columns, self.column_mapping_mode
                )
                dictionaries = set(layout.extra_present)
                data_names = [layout.wanted[f.name] for f in data_fields if f.name in layout.wanted]
                dictionaries.update(
                    scan_dictionary_columns(
                        parquet.metadata, parquet.schema_arrow, data_names, keep=keep_dictionaries
                    )
                )
                if dictionaries:  # the footer is parsed once: reopen with it
                    parquet = open_parquet(source, parquet.metadata, sorted(dictionaries))
                raw = parquet.read(columns=layout.names, use_threads=False) if layout.names else None
                num_rows = raw.num_rows if raw is not None else parquet.metadata.num_rows
            except (pa.ArrowException, OSError) as exc:
                if not is_format_error(exc):
                    raise
                raise corrupt_data_file_error(uri, self.table_path, exc) from exc
        except FileNotFoundError:
            if ignore_missing:
                logger.warning("skipping missing data file %s", uri)
                return self._empty(fields, extra_columns)
            raise DataFileNotFoundError(
                f"Data file {uri} of table {self.table_path} does not exist", table=self.table_path
            ) from None
        return self._assemble(
            file,
            fields,
            layout,
            raw,
            num_rows,
            row_filter=row_filter,
            extra_columns=extra_columns,
            keep_dictionaries=keep_dictionaries,
        )

    def _assemble(
        self,
        file: FileAction,
        fields: list[StructField],
        layout: _Layout,
        raw: pa.Table | None,
        num_rows: int,
        *,
        row_filter: RowFilter | None,
        extra_columns: Sequence[pa.Field],
        keep_dictionaries: bool = False,
    ) -> pa.Table:
        """The result table of :meth:`read_file` from the columns ``raw`` read as ``layout`` says
        (dictionary columns of the logical type kept as they are with ``keep_dictionaries``)."""
        if row_filter is not None:
            mask = row_filter.mask(num_rows, self.file_uri(file))
            raw = raw.filter(mask) if raw is not None else None
            num_rows = int(pc.sum(mask).as_py() or 0)
        arrays: list[pa.ChunkedArray | pa.Array] = []
        schema_fields = [arrow_field(f) for f in fields]
        for position, struct_field in enumerate(fields):
            if struct_field.name in self.partition_columns:
                value = self._partition_value(file, struct_field)
                arrays.append(partition_value_array(value, struct_field.type, num_rows))
            elif struct_field.name in layout.wanted and raw is not None:
                column = raw.column(layout.wanted[struct_field.name])
                logical = schema_fields[position]
                if keep_dictionaries and is_dictionary_of(column.type, logical.type):
                    schema_fields[position] = logical.with_type(column.type)
                    arrays.append(column)
                else:
                    if pa.types.is_dictionary(column.type):
                        column = decode_dictionary(column)
                    arrays.append(conform_column(column, struct_field.type, self.column_mapping_mode))
            else:
                arrays.append(pa.nulls(num_rows, arrow_type(struct_field.type)))
        for extra in extra_columns:
            if raw is not None and extra.name in layout.extra_present:
                arrays.append(raw.column(extra.name).cast(extra.type))
            else:
                arrays.append(pa.nulls(num_rows, extra.type))
            schema_fields.append(extra)
        return pa.Table.from_arrays(arrays, schema=_nullable(schema_fields))

    def read_unfiltered(
        self,
        files: Sequence[FileAction],
        columns: Sequence[str] | None = None,
        *,
        extra_columns: Sequence[pa.Field] = (),
        ignore_missing: bool = False,
        max_workers: int | None = None,
        finish: Callable[[int, pa.Table], pa.Table] | None = None,
    ) -> list[pa.Table]:
        """``[read_file(file, columns, row_filter=False, extra_columns=...) for file in files]``.

        Local files are scanned together, as one Arrow dataset per distinct physical schema: Arrow
        decodes them batch by batch on its own thread pool, with less CPU than file-by-file reads.
        Files on other storage are read ``max_workers`` at a time (default :attr:`concurrency`).
        ``finish(position, table)``, if given, replaces each file's table as soon as it is read,
        on the reading thread (so that it overlaps with the reading of the next files).
        """

        def done(position: int, table: pa.Table) -> pa.Table:
            return table if finish is None else finish(position, table)

        files = list(files)
        tables: list[pa.Table | None] = [None] * len(files)
        fields = self.read_fields(columns)
        data_fields = [f for f in fields if f.name not in self.partition_columns]
        groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, Any]]] = {}
        one_by_one: list[int] = []
        # Extra columns (``_change_type``) hold a handful of values: decoding them as dictionaries
        # and casting costs less than building each string. So do the string columns a large file
        # stores dictionary-encoded (read_file's rule; the scan casts them to the file's schema):
        # files are grouped by them too.
        extra_names = tuple(f.name for f in extra_columns)
        parquet_format = dataset_format(extra_names)
        for position, file in enumerate(files):
            path = local_path(self.file_uri(file))
            if path is None or len(files) == 1:
                one_by_one.append(position)
                continue
            try:
                fragment = parquet_format.make_fragment(path, filesystem=LOCAL_ARROW_FS)
                schema = fragment.physical_schema
                dictionaries = self._dictionary_columns(fragment, schema, data_fields)
            except (pa.ArrowException, OSError):
                one_by_one.append(position)  # read_file raises (naming it) or skips it, as asked
                continue
            key = (schema.to_string(show_schema_metadata=False), dictionaries)
            groups.setdefault(key, []).append((position, fragment))

        def scan(group: tuple[tuple[str, ...], list[tuple[int, Any]]]) -> list[tuple[int, pa.Table]]:
            dictionaries, members = group
            try:
                return scan_together(dictionaries, members)
            except (pa.ArrowException, OSError) as exc:
                if not is_format_error(exc):
                    raise
                # a damaged file: reading the files one by one names it
                return [(position, done(position, read_one(position))) for position, _ in members]

        def read_one(position: int) -> pa.Table:
            return self.read_file(
                files[position],
                columns,
                row_filter=False,
                extra_columns=extra_columns,
                ignore_missing=ignore_missing,
            )

        def scan_together(
            dictionaries: tuple[str, ...], members: list[tuple[int, Any]]
        ) -> list[tuple[int, pa.Table]]:
            if not dictionaries:
                return scan_with(parquet_format, members)
            # A fragment scans with the format that made it: made again (its footer is cached). A
            # batch whose values decode past one array's capacity fails the scan: the files are
            # then read one by one (scan), which decodes in slices.
            dictionary_format = dataset_format(extra_names + dictionaries)
            remade = [
                (position, dictionary_format.make_fragment(fragment.path, filesystem=LOCAL_ARROW_FS))
                for position, fragment in members
            ]
            return scan_with(dictionary_format, remade)

        def scan_with(group_format: Any, members: list[tuple[int, Any]]) -> list[tuple[int, pa.Table]]:
            schema = members[0][1].physical_schema
            layout = _Layout.of(schema, data_fields, extra_columns, self.column_mapping_mode)
            positions: dict[str, list[int]] = {}  # a file may be read twice
            fragments: dict[str, Any] = {}
            for position, fragment in members:
                positions.setdefault(fragment.path, []).append(position)
                fragments[fragment.path] = fragment
            assembled = []
            # Each file is assembled as soon as it is read, while Arrow decodes the next ones.
            scanned = scan_local(group_format, schema, list(fragments.values()), layout.names)
            for path, raw in scanned:
                num_rows = raw.num_rows if raw is not None else fragments[path].metadata.num_rows
                for position in positions[path]:
                    table = self._assemble(
                        files[position],
                        fields,
                        layout,
                        raw,
                        num_rows,
                        row_filter=None,
                        extra_columns=extra_columns,
                    )
                    assembled.append((position, done(position, table)))
            return assembled

        # Groups are scanned at once (Arrow's thread pool stays busy while one group finishes), on
        # threads of their own: this may run inside a map_concurrently task.
        members_of = [(key[1], members) for key, members in groups.items()]
        scans = map_concurrently(scan, members_of, Work.SCAN, self.concurrency)
        for scanned in scans:
            for position, table in scanned:
                tables[position] = table
        read = map_concurrently(
            lambda position: done(position, read_one(position)),
            one_by_one,
            Work.DATA,
            max_workers or self.concurrency,
        )
        for position, table in zip(one_by_one, read, strict=True):
            tables[position] = table
        return [table for table in tables if table is not None]  # every position is filled

    def _dictionary_columns(
        self, fragment: Any, schema: pa.Schema, data_fields: Sequence[StructField]
    ) -> tuple[str, ...]:
        """The string columns a file of at least :data:`DECODE_ROWS` rows stores
        dictionary-encoded throughout, read as dictionaries and decoded by :meth:`_assemble`."""
        metadata = fragment.metadata
        if metadata.num_rows < DECODE_ROWS:  # the layout is not worked out for small files
            return ()
        layout = _Layout.of(schema, data_fields, (), self.column_mapping_mode)
        return tuple(scan_dictionary_columns(metadata, schema, layout.names))

    def _partition_value(self, file: FileAction, struct_field: StructField) -> str | None:
        return partition_value(file.partition_values or {}, struct_field, self.column_mapping_mode != "none")

    def _empty(self, fields: list[StructField], extra_columns: Sequence[pa.Field]) -> pa.Table:
        schema = _nullable([arrow_field(f) for f in fields] + list(extra_columns))
        return schema.empty_table()

    def read_files(
        self,
        files: Iterable[FileAction],
        columns: Sequence[str] | None = None,
        *,
        max_workers: int | None = None,
        ignore_missing: bool = False,
    ) -> pa.Table:
        """All rows of ``files`` (deletion vectors applied), concatenated in the given order.

        Files without a deletion vector are read by :meth:`read_unfiltered`; the others
        ``max_workers`` at a time (default: :attr:`concurrency`).
        """
        files = list(files)
        workers = max_workers or self.concurrency
        whole = [i for i, file in enumerate(files) if not file_deletion_vectors(file)]
        found = self.read_unfiltered(
            [files[i] for i in whole], columns, ignore_missing=ignore_missing, max_workers=workers
        )
        tables = dict(zip(whole, found, strict=True))
        rest = [i for i in range(len(files)) if i not in tables]
        known = self.read_deletion_vectors(files[i] for i in rest)  # one request per DV file

        def read_one(i: int) -> pa.Table:
            row_filter = self.deletion_filter(files[i], known)
            return self.read_file(files[i], columns, row_filter=row_filter, ignore_missing=ignore_missing)

        read = map_concurrently(read_one, rest, Work.DATA, workers)
        tables.update(zip(rest, read, strict=True))
        if not tables:
            return self._empty(self.read_fields(columns), ())
        return pa.concat_tables([tables[i] for i in range(len(files))])


def _nullable(fields: list[pa.Field]) -> pa.Schema:
    """Result columns are nullable: a file may lack a column (added later), which reads as nulls."""
    return pa.schema([f.with_nullable(True) for f in fields])


@dataclass(frozen=True)
class _Layout:
    """Where requested columns are in a file's physical schema: logical name -> column name."""

    wanted: dict[str, str]
    extra_present: frozenset[str]
    names: list[str]

    @classmethod
    def of(
        cls, schema: pa.Schema, fields: Sequence[StructField], extra_columns: Sequence[pa.Field], mode: str
    ) -> _Layout:
        """The layout of data ``fields`` and ``extra_columns`` in a file of ``schema``."""
        wanted: dict[str, str] = {}
        finder = FieldFinder(schema, mode)
        names = schema.names
        for struct_field in fields:
            index = finder.index(struct_field)
            if index is not None:
                wanted[struct_field.name] = names[index]
        extra_present = [f.name for f in extra_columns if schema.get_field_index(f.name) >= 0]
        return cls(wanted, frozenset(extra_present), list(wanted.values()) + extra_present)


# -- entry points ------------------------------------------------------------------------------
def read_files(
    files: Iterable[FileAction],
    *,
    table_path: str,
    metadata: Metadata,
    protocol: Protocol | None = None,
    conf: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    max_workers: int | None = None,
) -> pa.Table:
    """The rows of ``files`` with the table's logical schema (or ``columns`` of it).

    Partition values are filled in, column mapping is honoured and deletion vectors of
    ``add``/``remove`` actions are applied. Raises :class:`DataFileNotFoundError` for a missing
    file and :class:`UnsupportedTableFeatureError` for unreadable reader features.
    """
    reader = TableReader.for_metadata(table_path, metadata, protocol, conf)
    return reader.read_files(files, columns, max_workers=max_workers)
