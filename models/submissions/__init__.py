"""A submission from upload to its last state: intake, quotas, artifacts, life cycle, run seed.

- :mod:`~models.submissions.intake`: an upload in one pass, from its first check to the queue
  (``submit``, the API's one call for it); dedup, quota and storage, all or nothing;
- :mod:`~models.submissions.quotas`: a user's submissions over 24 hours and in flight, and the
  one quota decision (``decide``) over every quota;
- :mod:`~models.submissions.compute_quota`: the daily compute quota in forward passes;
- :mod:`~models.submissions.refusals`: the rate limit on refused uploads;
- :mod:`~models.submissions.artifacts`: stored weights files, shared by content;
- :mod:`~models.submissions.storage`: where artifacts live under ``Settings.artifacts_dir``;
- :mod:`~models.submissions.lifecycle`: transitions, leases, failure, rejection and reruns;
- :mod:`~models.submissions.run_seeds`: commit-reveal of each run's noise seed;
- :mod:`~models.submissions.queries`: who may see a submission, cancel, rerun, moderate;
- :mod:`~models.submissions.zoo`: which entries' weights may be downloaded, by whom.

The run seed is here, not in :mod:`models.runs`, because intake commits to it in the
transaction that creates the submission, and the stages' work item reads it.
"""
