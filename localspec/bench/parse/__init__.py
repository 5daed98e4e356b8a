"""`localspec bench parse`: PARSE on HumanEval -- judge discrimination, accuracy, speed.

cli.py (the steps and their flags, started by localspec/cli/main.py's PASSTHROUGH), common.py
(session, settings, the resumable JSON-lines files), calibrate.py + probe.py (record
every judge's raw material; the probe is the one bench module below the Session API),
scores.py (AUROC of candidate scores), report.py (pass@1 and time per setting) and
summary.py (the tables and bounds printed from the report records).
"""
