"""The job side: what runs in a training job's prolog or script (the pre-job hook, the config
exports, qcomms adoption, the fingerprint). Standard library only (plus trials.choices): a job
starts on time whatever the service or its packages do (tests/test_imports.py holds this)."""
