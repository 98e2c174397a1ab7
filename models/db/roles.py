"""User roles: what an account may do.

A module of its own (standard library only) so the ``certbench admin create-user --role`` option
can name the choices without importing SQLAlchemy and the ORM (``models.db.entities`` re-exports
it).
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a user may do: submitters submit and read their own; admins manage everything."""

    SUBMITTER = "submitter"
    ADMIN = "admin"
