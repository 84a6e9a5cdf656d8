"""Index the jobs with a request waiting for the loop (a partial index: those rows
only), which it looks for at every pass: without it each pass read the whole
table, a quarter of the loop's time over a queue of ten thousand jobs.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("jobs")}
    if "ix_jobs_request" not in have:  # a store made whole by this release has it
        waiting = sa.text("request IS NOT NULL")
        op.create_index(
            "ix_jobs_request",
            "jobs",
            ["request"],
            sqlite_where=waiting,
            postgresql_where=waiting,
        )


def downgrade() -> None:
    op.drop_index("ix_jobs_request", table_name="jobs")
