"""Index jobs by (user, state): a submission counts its user's jobs not yet ended
(``max_jobs_per_user``), which read every job the user ever ran without it, 20 ms
of each submission once a user had twenty thousand jobs behind them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("jobs")}
    if "ix_jobs_user_status" not in have:  # a store made whole by this release has it
        op.create_index("ix_jobs_user_status", "jobs", ["user", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_status", table_name="jobs")
