"""A table for jobs moved out of the hot tables once they ended long enough ago
(``archive_after``, ``corral store archive``): their accounting and spec.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "archived_jobs" in sa.inspect(op.get_bind()).get_table_names():
        return  # (a store made whole by this release has it)
    op.create_table(
        "archived_jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.Float(), nullable=False),
        sa.Column("first_start", sa.Float(), nullable=True),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.Column("elapsed", sa.Float(), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("archived_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_archived_jobs_user_submit", "archived_jobs", ["user", "submit_time"])


def downgrade() -> None:
    op.drop_index("ix_archived_jobs_user_submit", table_name="archived_jobs")
    op.drop_table("archived_jobs")
