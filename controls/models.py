"""Bulk jobs: an operator's bulk control (retry or cancel of Work, replay of Events) stored
with its targets, run in batches in the background, with its progress (N of M) and each
target's outcome. See :mod:`controls.jobs`."""

from __future__ import annotations

from django.db import models


class JobKind(models.TextChoices):
    RETRY_WORK = "retry_work", "retry Work"
    CANCEL_WORK = "cancel_work", "cancel Work"
    REPLAY_EVENT = "replay_event", "replay Events"


class JobState(models.TextChoices):
    PENDING = "pending", "pending"  # stored, no batch run yet
    RUNNING = "running", "running"  # some batches run, more to go
    DONE = "done", "done"  # every target has its outcome
    CANCELLED = "cancelled", "cancelled"  # stopped by an operator: the targets left were not acted on


FINISHED_JOB_STATES = frozenset({JobState.DONE, JobState.CANCELLED})


class ItemOutcome(models.TextChoices):
    DONE = "done", "done"
    REFUSED = "refused", "refused"  # the target's state refuses the control
    NOT_FOUND = "not_found", "not found"


class BulkJob(models.Model):
    """One bulk control: what it does, who asked, how far it got (``position`` of ``total``)."""

    kind = models.CharField(max_length=16, choices=JobKind.choices)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    created_by = models.CharField(max_length=150)
    # What the operator chose, in words ("all 3 Work matching status=parked", "12 selected Work").
    description = models.CharField(max_length=500, blank=True, default="")
    # Cancel only: the operator's reason, kept in each control Event.
    reason = models.CharField(max_length=500, blank=True, default="")
    total = models.PositiveIntegerField()
    # The targets in the order they are acted on (Work ids or Event seqs), stored with the job in
    # one row: storing a job of 10,000 is one insert, and each batch writes its targets' items.
    targets = models.JSONField(default=list)
    # How many targets have their outcome (the next batch starts at this position; a cancelled
    # job's targets from here on were not acted on).
    position = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    refused = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["state", "id"], name="bulkjob_state_idx")]

    def __str__(self) -> str:
        return f"job {self.pk}: {self.kind} {self.position} of {self.total} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES

    @property
    def left(self) -> int:
        """Targets without an outcome (not acted on yet, or ever once cancelled)."""
        return self.total - self.position

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(100 * self.position / self.total)


class BulkJobItem(models.Model):
    """One target of a job (a Work id or an Event seq) at its place in the job, and its outcome:
    the control Event (``control_seq``) and, for a replay, the copy (``copy_seq``). Written by
    the batch that acts on it: a target without one has not been acted on (yet, or ever, once the
    job was cancelled)."""

    job = models.ForeignKey(BulkJob, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    target = models.BigIntegerField()
    outcome = models.CharField(max_length=16, choices=ItemOutcome.choices)
    message = models.CharField(max_length=500, blank=True, default="")
    control_seq = models.BigIntegerField(null=True, blank=True)
    copy_seq = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="bulkjobitem_job_position_uniq"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} #{self.position}: {self.target} {self.outcome}"
