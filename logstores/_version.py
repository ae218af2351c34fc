"""The version of the ``delta-logstores`` distribution (both ``logstores`` and ``replay``), in
one place: the package build reads it from here (``pyproject.toml``), commits carry it in
``engineInfo`` and ``deltalog --version`` prints it, without reading installed package metadata
(which costs a process tens of milliseconds the first time)."""

__version__ = "0.1.0"
