"""The Delta protocol, pure: actions, schemas, file names, table properties and configuration,
errors, timestamps and the Arrow types of actions.

The bottom layer: it imports only the standard library, pyarrow and orjson, and does no I/O.
"""
