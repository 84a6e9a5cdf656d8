"""The store as the releases before versioned migrations wrote it.

Stores from those releases have no version table: opening one adds the
nullable columns its release lacked (the rule those releases followed) and
stamps it with this revision, so every migration after this one applies.
A new store is made whole by ``create_all`` and stamped with the head.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing: this revision is the unversioned schema itself."""


def downgrade() -> None:
    """Nothing below the first versioned schema."""
