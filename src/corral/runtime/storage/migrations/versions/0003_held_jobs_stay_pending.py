"""Held jobs stay PENDING, as in Slurm: who holds a job is its own column.

Before this revision a job submitted held (or held by ``corral hold``) was
stored SUSPENDED, so ``queue -t PD`` hid it. Jobs stored SUSPENDED with the
reason ``JobHeldUser`` (those submitted held) become PENDING held by their
user; a job held with ``corral hold`` before this revision kept the reason
``Suspended``, which a suspended running job also has, so it stays SUSPENDED
(``corral release`` and ``resume`` still let it go).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobs")}
    if "held" not in have:  # a store from before versioned migrations gained it already
        op.add_column("jobs", sa.Column("held", sa.String(8), nullable=True))
    op.execute(
        "UPDATE jobs SET status = 'PENDING', held = 'user'"
        " WHERE status = 'SUSPENDED' AND reason = 'JobHeldUser'"
    )


def downgrade() -> None:
    op.execute("UPDATE jobs SET status = 'SUSPENDED' WHERE status = 'PENDING' AND held IS NOT NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("held")
