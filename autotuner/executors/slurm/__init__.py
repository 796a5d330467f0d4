"""Slurm executor: a batch job per launch, its sbatch script and options.

Nothing is imported here: the options are read where no backend client is installed."""
