"""A table for what a batch job was submitted with beyond its spec: its script's text
and the submitting shell's environment (sbatch stores both at submission).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "job_inputs" in sa.inspect(op.get_bind()).get_table_names():
        return  # (a store made whole by this release has it)
    op.create_table(
        "job_inputs",
        sa.Column("job_id", sa.Integer(), primary_key=True),
        sa.Column("script", sa.Text(), nullable=True),
        sa.Column("environment", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("job_inputs")
