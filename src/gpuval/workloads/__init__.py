"""What runs: the collective bench, the health suite, LAMMPS, training."""
