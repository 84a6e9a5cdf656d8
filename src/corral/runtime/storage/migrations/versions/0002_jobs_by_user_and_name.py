"""Index jobs by (user, name): singleton dependencies and ``queue -n`` look them up.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("jobs")}
    if "ix_jobs_user_name" not in have:  # a store made whole by this release has it
        op.create_index("ix_jobs_user_name", "jobs", ["user", "name"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_name", table_name="jobs")
