"""The certification stage's figure keys, shared by the stage
(``models.stages.certification.stage``),
its intervals (``models.stages.certification.intervals``) and paired comparisons
(``models.boards.comparisons``), so that none of them imports another for a constant."""

#: Certified-accuracy radii of the leaderboard → metric keys.
RADIUS_KEYS = {0.0: "cert_acc_000", 0.25: "cert_acc_025", 0.5: "cert_acc_050",
               0.75: "cert_acc_075", 1.0: "cert_acc_100"}  # fmt: skip
BANDS = ("low", "mid", "high")
PA_QUANTILES = {"pa_q10": "0.1", "pa_q25": "0.25", "pa_q75": "0.75", "pa_q90": "0.9"}
