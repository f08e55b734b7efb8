"""LAMMPS as a reference workload: standard benchmark inputs, runs under MPI, and log.lammps of any version."""
